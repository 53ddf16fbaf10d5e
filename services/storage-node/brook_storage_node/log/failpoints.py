"""Crash points for the crash tests of the cleaner's swap: ``BROOK_CLEANER_CRASH_AT=<step>`` in
the environment makes the process kill itself (SIGKILL, as a power cut or ``kill -9`` would)
when the swap reaches that step. Unset (always, outside those tests), a crash point is one
dictionary look-up."""

from __future__ import annotations

import os
import signal
from typing import Final

CRASH_AT_ENV: Final = "BROOK_CLEANER_CRASH_AT"


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
