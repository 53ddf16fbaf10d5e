"""Fault points for the tests of the cleaner's swap. ``BROOK_CLEANER_CRASH_AT=<step>`` in the
environment makes the process kill itself (SIGKILL, as a power cut or ``kill -9`` would) when
the swap reaches that step; ``BROOK_CLEANER_FAIL_AT=<step>`` makes the step fail with an I/O
error (EIO), as a failing disk would. Unset (always, outside those tests), a fault point is
two dictionary look-ups."""

from __future__ import annotations

import errno
import os
import signal
from typing import Final

CRASH_AT_ENV: Final = "BROOK_CLEANER_CRASH_AT"
FAIL_AT_ENV: Final = "BROOK_CLEANER_FAIL_AT"


def fault_point(step: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(FAIL_AT_ENV) == step:
        raise OSError(errno.EIO, f"injected I/O error at the swap step {step}")
