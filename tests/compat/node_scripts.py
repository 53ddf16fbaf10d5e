"""Runs a Node.js script of the test suite and returns the JSON it prints.

The npm packages the scripts import live in the repository root's node_modules (pinned in
package.json and package-lock.json, installed by tools/install-dev). A missing `node` or
package fails the test rather than skipping it: these tests are the only proof that those
clients work.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import pytest

NODE_MODULES: Final = Path(__file__).resolve().parents[2] / "node_modules"


def run_node_json(
    script: Path, args: Sequence[str], *, packages: Sequence[str], timeout_s: float
) -> Any:
    """The JSON `script` prints on stdout when run with `args`; fails the test with its stderr
    when it exits non-zero or runs longer than `timeout_s`, and before running it if `node` or
    one of `packages` (npm names, e.g. "@grpc/grpc-js") is not installed."""
    node = shutil.which("node")
    assert node, "Node.js is not installed"
    for package in packages:
        assert (NODE_MODULES / package).is_dir(), (
            f"{package} is not installed: run tools/install-dev"
        )
    command = [node, str(script), *args]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as e:
        # A process that printed its result has a client it did not close.
        what = "printed its result but did not exit" if e.stdout else "did not finish"
        pytest.fail(f"{command} {what} within {timeout_s} s; stderr: {e.stderr!r}")
    assert done.returncode == 0, f"{command} exited {done.returncode}: {done.stderr}"
    return json.loads(done.stdout)
