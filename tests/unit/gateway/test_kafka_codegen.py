"""The committed Kafka message specs are what the generator makes from the schemas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GENERATOR = ROOT / "tools" / "gen_kafka_protocol.py"
SCHEMAS = ROOT.parent / "shared" / "kafka-protocol" / "messages"
TIMEOUT_S = 60


def test_regenerating_the_kafka_message_specs_changes_nothing() -> None:
    # CI has the schemas beside the clone; without them this must fail, not pass vacuously.
    assert SCHEMAS.is_dir(), f"Kafka message schemas missing: expected {SCHEMAS}"
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_generator_fails_clearly_without_the_schemas(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--messages", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 2
    assert "kafka-protocol/messages" in result.stderr


@pytest.mark.parametrize("name", ["HeartbeatRequest", "ApiVersionsResponse"])
def test_comments_in_schemas_are_stripped_but_not_inside_strings(name: str) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_kafka_protocol
    finally:
        sys.path.pop(0)
    assert gen_kafka_protocol.strip_comments('{"a": "x//y"} // c') == '{"a": "x//y"} '
    assert gen_kafka_protocol.load_schema(SCHEMAS / f"{name}.json")["name"] == name
