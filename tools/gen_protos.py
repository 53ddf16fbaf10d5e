"""Generate the Python stubs of the brook.v1 contract (proto/brook/v1 → brook/v1).

The stubs are committed so that installing Brook needs no code generator. Run this after
changing a .proto file; `--check` regenerates into a temporary directory and fails if the
result differs from what is committed (CI and tests/unit/test_contract.py run it).

The generator is grpcio-tools at the exact version pinned in pyproject.toml's [dev] extra:
another version would generate different (if equivalent) code.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE_DIR = Path("brook") / "v1"
# Files in brook/v1 that are written by hand, not generated.
HAND_WRITTEN = {"__init__.py"}


def generate(out_root: Path) -> None:
    """Run protoc for every .proto under proto/brook/v1, writing below out_root."""
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
    )
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PACKAGE_DIR}")
    (out_root / PACKAGE_DIR).mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *protos,
    ]
    status = protoc.main(args)
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")


def generated_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_file() and p.name not in HAND_WRITTEN}


def check() -> list[str]:
    """Regenerate into a temporary directory; return a description of every difference."""
    committed = ROOT / PACKAGE_DIR
    with tempfile.TemporaryDirectory() as tmp:
        fresh_root = Path(tmp)
        generate(fresh_root)
        fresh = fresh_root / PACKAGE_DIR
        problems: list[str] = []
        committed_names = generated_files(committed) - {"__pycache__"}
        fresh_names = generated_files(fresh)
        for name in sorted(fresh_names - committed_names):
            problems.append(f"{PACKAGE_DIR / name}: missing (not committed)")
        for name in sorted(committed_names - fresh_names):
            problems.append(f"{PACKAGE_DIR / name}: committed but no longer generated")
        for name in sorted(fresh_names & committed_names):
            if not filecmp.cmp(fresh / name, committed / name, shallow=False):
                problems.append(f"{PACKAGE_DIR / name}: differs from a fresh generation")
        return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    args = parser.parse_args()
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("stubs are stale: run `python tools/gen_protos.py` and commit", file=sys.stderr)
            return 1
        print("stubs match proto/")
        return 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
