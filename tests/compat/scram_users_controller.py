"""A controller process that also commits the SCRAM users written to a directory: the tests'
stand-in for AlterUserScramCredentials until that API exists (issue #21, part A), so that the
gateway's SASL tests have users in the metadata without a product API of their own.

Run through ``LocalCluster``'s ``spawn_prefix`` (``security_support.scram_users_prefix``):
``python scram_users_controller.py USERS_DIR -- <the launcher's command>``. It serves the real
controller (brook_controller's ServiceSpec, unchanged) and, beside it, every 0.1 s commits a
UserScramCredentialRecord (``brook.security.scram.new_credential``) for each ``*.json`` file
of USERS_DIR ({"name", "password", "mechanism"}) through the controller's own command path
(a RECORDS command proposed to its Raft engine), then writes ``<file>.done`` with the
outcome. One controller only: it must be the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import signal
import sys
from pathlib import Path
from typing import Final

from brook_controller.app import SPEC, Controller
from brook_controller.commands import Command, CommandKind, encode_command
from brook_controller.raft import NotLeaderError

from brook.config import Config
from brook.security.scram import MECHANISMS, new_credential
from brook.server import ServiceContext, service_main
from brook.v1 import metadata_pb2

POLL_S: Final = 0.1
PROPOSE_TIMEOUT_S: Final = 10.0


class UsersController(Controller):
    def __init__(self, config: Config, users: Path) -> None:
        super().__init__(config)
        self._users = users

    async def start(self, context: ServiceContext) -> None:
        await super().start(context)
        context.tasks.spawn(self._commit_users(), name="test.scram-users")

    async def _commit_users(self) -> None:
        while True:
            for path in sorted(self._users.glob("*.json")):
                done = path.with_suffix(".done")
                if not done.exists():
                    with contextlib.suppress(NotLeaderError):  # not yet: tried again
                        done.write_text(await self._commit(json.loads(path.read_text())))
            await asyncio.sleep(POLL_S)

    async def _commit(self, user: dict[str, str]) -> str:
        engine = self._engine
        assert engine is not None
        record = new_credential(MECHANISMS[user["mechanism"]], user["name"], user["password"])
        command = Command(
            CommandKind.RECORDS,
            engine.term,
            records=[metadata_pb2.MetadataRecord(user_scram_credential=record)],
        )
        outcome = await engine.propose(encode_command(command), PROPOSE_TIMEOUT_S)
        return outcome.status.value


def main(argv: list[str]) -> int:
    users, separator, *command = argv
    assert separator == "--", "usage: scram_users_controller.py USERS_DIR -- COMMAND..."
    # As the launcher's own shim: SIGTERM when the launcher dies.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    config = command[command.index("--config") + 1]
    spec = dataclasses.replace(SPEC, create=lambda c: UsersController(c, Path(users)))
    return service_main(spec, ["--config", config])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
