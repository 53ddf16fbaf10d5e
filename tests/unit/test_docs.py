"""Generated documentation matches the code it documents."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_config_docs  # noqa: E402


def test_configuration_reference_matches_every_services_definitions() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == gen_config_docs.render(), (
        "docs/configuration.md is stale: run `python tools/gen_config_docs.py`"
    )


def test_configuration_reference_documents_every_setting_of_every_service() -> None:
    from brook.cli import SERVICE_PACKAGES, load_service_spec

    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for service in SERVICE_PACKAGES:
        for key in load_service_spec(service).config_def.keys:
            assert f"`{key.name}`" in committed, f"{service}: {key.name} undocumented"
