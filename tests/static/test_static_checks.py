"""Static checks run as part of the test suite, so the README's one test command covers them.

Each check runs the real tool on the whole tree; a failure prints the tool's own report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600


def _run(*args: str) -> None:
    result = subprocess.run(
        list(args), cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def _venv_tool(name: str) -> str:
    """The tool installed next to this interpreter (the project's venv), else on PATH."""
    candidate = Path(sys.executable).with_name(name)
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    assert found, f"{name} is not installed: run the install command in README.md"
    return found


def test_ruff_lint_is_clean() -> None:
    _run(_venv_tool("ruff"), "check", ".")


def test_ruff_format_is_clean() -> None:
    _run(_venv_tool("ruff"), "format", "--check", ".")


def test_mypy_strict_is_clean() -> None:
    _run(_venv_tool("mypy"))


def test_buf_lint_standard_is_clean() -> None:
    buf = ROOT / "node_modules" / ".bin" / "buf"
    assert buf.exists(), "buf is not installed: run tools/install-dev"
    _run(str(buf), "lint")


def test_buf_format_is_clean() -> None:
    buf = ROOT / "node_modules" / ".bin" / "buf"
    assert buf.exists(), "buf is not installed: run tools/install-dev"
    _run(str(buf), "format", "--diff", "--exit-code")


def test_shell_scripts_are_executable() -> None:
    for script in [ROOT / ".ci" / "run", ROOT / "tools" / "install-dev"]:
        assert script.exists(), script
        assert os.access(script, os.X_OK), f"{script} is not executable"


def test_test_modules_have_unique_names() -> None:
    """pytest imports test modules by their base name (rootdir-relative, no packages): two
    test files with one name fail the whole run's collection, whichever subset passed alone."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test modules with the same name: " + "; ".join(clashes)
