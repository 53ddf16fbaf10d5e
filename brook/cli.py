"""The `brook` command.

    brook --version                print Brook's version (the installed package's metadata)
    brook storage-node|controller|group-coordinator|gateway [--config PATH] [--override K=V]...
    brook config docs SERVICE      print the Markdown table of SERVICE's settings
    brook cluster ...              the local cluster launcher (brook.launcher)
    brook health HOST:PORT         a gRPC health check (brook.health)

Every command that reaches a cluster takes ``--command-config FILE`` (brook.tools.options):
the client security settings of a TLS cluster, applied here to every channel it opens.
    brook transactions ...         transactions and hanging ones (brook.tools.transactions)
    brook log-dirs describe        partition logs, cleaned and dirty sizes (brook.tools.log_dirs)
    brook delete-records ...       delete records below offsets (brook.tools.delete_records)
    brook dump-log FILE...         segment, index and snapshot files decoded (brook.tools.dump_log)
    brook acls --add|--remove|--list ...  ACLs, as kafka-acls (brook.tools.acls)
    brook users add|delete|list    users' SCRAM credentials (brook.tools.users)

Each subcommand is one function taking the argparse subparsers object: it adds its parser and
sets `func`, the handler that receives the parsed arguments and returns the exit status. To add
a subcommand, write such a function and list it in `COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from brook.admin_cli import add_admin_commands
from brook.health import add_health_command
from brook.launcher import add_cluster_command
from brook.server import ServiceSpec, add_service_arguments, run_service
from brook.tools import add_tool_commands
from brook.tools.acls import add_acls_command
from brook.tools.delete_records import add_delete_records_command
from brook.tools.dump_log import add_dump_log_command
from brook.tools.groups import add_groups_command
from brook.tools.log_dirs import add_log_dirs_command
from brook.tools.options import UsageError, apply_command_config, report_error
from brook.tools.reassign import add_reassign_command
from brook.tools.transactions import add_transactions_command
from brook.tools.users import add_users_command

__all__ = ["COMMANDS", "SERVICE_PACKAGES", "installed_version", "load_service_spec", "main"]

SERVICE_PACKAGES: Final[Mapping[str, str]] = {
    "storage-node": "brook_storage_node",
    "controller": "brook_controller",
    "group-coordinator": "brook_group_coordinator",
    "gateway": "brook_gateway",
}
"""Service name -> the package run with `python -m`; its `app` module defines `SPEC`."""


def load_service_spec(name: str) -> ServiceSpec:
    """The ServiceSpec of a service by name (imported on demand: `brook` starts fast)."""
    spec = importlib.import_module(f"{SERVICE_PACKAGES[name]}.app").SPEC
    assert isinstance(spec, ServiceSpec)
    return spec


def add_service_commands(subparsers: Any) -> None:
    for name in SERVICE_PACKAGES:
        words = name.replace("-", " ")
        parser = subparsers.add_parser(
            name,
            help=f"run a {words}",
            description=f"Run a Brook {words} in the foreground until SIGTERM or SIGINT. "
            "Configuration, lowest to highest precedence: defaults < --config file < BROOK_* "
            "environment variables < --override.",
        )
        add_service_arguments(parser)
        parser.set_defaults(func=_run_service_command, service=name)


def _run_service_command(args: argparse.Namespace) -> int:
    return run_service(
        load_service_spec(args.service),
        config_path=args.config,
        overrides=args.override,
        prog=f"brook {args.service}",
    )


def add_config_command(subparsers: Any) -> None:
    config = subparsers.add_parser("config", help="inspect service configuration")
    actions = config.add_subparsers(dest="config_command", required=True)
    docs = actions.add_parser(
        "docs",
        help="print a Markdown table of a service's settings",
        description="Print every setting of SERVICE (name, type, default, valid values, "
        "importance, description) as a Markdown table.",
    )
    docs.add_argument("service", choices=sorted(SERVICE_PACKAGES), metavar="SERVICE")
    docs.set_defaults(func=_config_docs_command)


def _config_docs_command(args: argparse.Namespace) -> int:
    sys.stdout.write(load_service_spec(args.service).config_def.to_markdown())
    return 0


COMMANDS: Final[Sequence[Callable[[Any], None]]] = (
    add_service_commands,
    add_config_command,
    add_cluster_command,
    add_health_command,
    add_admin_commands,
    add_tool_commands,
    add_groups_command,
    add_transactions_command,
    add_log_dirs_command,
    add_reassign_command,
    add_delete_records_command,
    add_dump_log_command,
    add_acls_command,
    add_users_command,
)


def installed_version() -> str:
    """Brook's version as the installed package's metadata states it ("unknown" when Brook
    runs from a source tree that was never installed)."""
    try:
        return importlib.metadata.version("brook")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="brook", description="Brook: a partitioned, replicated commit log."
    )
    parser.add_argument("--version", action="version", version=f"brook {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        apply_command_config(args)
    except UsageError as error:
        return report_error(args.command, error)
    status = args.func(args)
    assert isinstance(status, int)
    return status
