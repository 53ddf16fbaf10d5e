"""``brook users``: users' SCRAM credentials, what kafka-configs --entity-type users does for
SCRAM-SHA-256/512.

    brook users add --user alice [--mechanism SCRAM-SHA-512]... [--iterations N]
                    [--password-file FILE | --password-stdin]
    brook users delete --user alice [--mechanism SCRAM-SHA-256]...
    brook users list [--user alice]... [--json]

A password never comes from the command line (other users of the machine see it there): it is
asked for twice at the terminal, or read from the first line of stdin (``--password-stdin``)
or of a file (``--password-file``). The client salts and hashes it; the cluster stores the
SCRAM keys only. ``add`` makes a credential for each ``--mechanism`` (both when none is
given), ``delete`` removes the named mechanisms' (every one the user has when none is named),
``list`` shows each user's mechanisms and iteration counts. Exit status as brook topics: 0 on
success, 1 when the cluster refused or did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brook.admin_cli import (
    EXIT_OK,
    UsageError,
    add_json_option,
    handler,
    print_json,
    print_table,
    report,
)
from brook.security.scram import ITERATIONS_DEFAULT, MECHANISMS

if TYPE_CHECKING:
    from brook.client.admin import Admin

__all__ = ["add_users_command", "read_password"]


def add_users_command(subparsers: Any) -> None:
    users = subparsers.add_parser(
        "users",
        help="add, delete and list users' SCRAM credentials",
        description="Users' SCRAM credentials (SASL SCRAM-SHA-256/512 and PLAIN at the gateway, "
        "Basic credentials on gRPC over TLS).",
    )
    actions = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="add a user, or change its password")
    add.add_argument("--user", required=True)
    _mechanisms(add, "(both)")
    add.add_argument(
        "--iterations",
        type=int,
        default=ITERATIONS_DEFAULT,
        metavar="N",
        help=f"PBKDF2 iterations, 4096..16384 ({ITERATIONS_DEFAULT})",
    )
    source = add.add_mutually_exclusive_group()
    source.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="read the password from FILE's first line",
    )
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    handler(add, _add)

    delete = actions.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("--user", required=True)
    _mechanisms(delete, "(every one the user has)")
    handler(delete, _delete)

    listing = actions.add_parser("list", help="users, their mechanisms and iteration counts")
    listing.add_argument("--user", action="append", default=[], help="(every user)")
    add_json_option(listing)
    handler(listing, _list)


def _mechanisms(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--mechanism", action="append", default=[], choices=sorted(MECHANISMS), help=default
    )


def read_password(args: argparse.Namespace) -> str:
    """The password from --password-file, --password-stdin or the terminal (typed twice);
    UsageError when there is none, or no terminal to ask at."""
    if args.password_file is not None:
        path: Path = args.password_file
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot read {path}: {error.strerror}") from None
        password = text.splitlines()[0] if text else ""
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            raise UsageError("the passwords differ")
    else:
        raise UsageError(
            "no terminal to ask the password at: give --password-stdin or --password-file"
        )
    if not password:
        raise UsageError("the password must not be empty")
    return password


def _add(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import UserScramCredentialUpsertion

    password = read_password(args)
    results = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(args.user, password, mechanism, args.iterations)
            for mechanism in args.mechanism or sorted(MECHANISMS)
        ],
        timeout_ms=args.timeout_ms,
    )
    return report(results, "Set the SCRAM credentials of user")


def _delete(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import UserScramCredentialDeletion

    mechanisms = args.mechanism or [
        info.mechanism
        for info in admin.describe_user_scram_credentials([args.user], timeout_ms=args.timeout_ms)[
            args.user
        ]
    ]
    results = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(args.user, mechanism) for mechanism in mechanisms],
        timeout_ms=args.timeout_ms,
    )
    return report(results, "Deleted the SCRAM credentials of user")


def _list(admin: Admin, args: argparse.Namespace) -> int:
    described = admin.describe_user_scram_credentials(args.user or None, timeout_ms=args.timeout_ms)
    if args.json:
        print_json(
            {
                "users": [
                    {
                        "user": user,
                        "credentials": [
                            {"mechanism": info.mechanism, "iterations": info.iterations}
                            for info in infos
                        ],
                    }
                    for user, infos in described.items()
                ]
            }
        )
        return EXIT_OK
    print_table(
        ("USER", "MECHANISM", "ITERATIONS"),
        [
            (user, info.mechanism, info.iterations)
            for user, infos in described.items()
            for info in infos
        ],
    )
    return EXIT_OK
