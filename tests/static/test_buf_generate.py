"""The buf.gen.<lang>.yaml templates (Go, Java, TypeScript client code) work with the pinned buf,
checked offline.

Their plugins are Buf's remote plugins, which run on buf.build. The test swaps each for
describe_plugin.py, a local plugin that records what it is given, and runs `buf generate` on
the template otherwise unchanged: buf must accept the template, and every remote plugin must be
asked to generate every file of the contract with the template's options and, through managed
mode, the package options its language needs (the .proto files carry none).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

ROOT: Final = Path(__file__).resolve().parents[2]
BUF: Final = ROOT / "node_modules" / ".bin" / "buf"
DESCRIBE_PLUGIN: Final = Path(__file__).with_name("describe_plugin.py")
CONTRACT: Final = sorted(
    str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto" / "brook" / "v1").glob("*.proto")
)
TIMEOUT_S: Final = 120


@dataclass(frozen=True)
class Template:
    plugins: tuple[str, ...]
    out: str
    parameter: str
    options: dict[str, object]
    """File options every generated file must have."""


TEMPLATES: Final = {
    "buf.gen.go.yaml": Template(
        ("buf.build/protocolbuffers/go", "buf.build/grpc/go"),
        "gen/go",
        "paths=source_relative",
        {"go_package": "example.com/brook/gen/go/brook/v1;brookv1"},
    ),
    "buf.gen.java.yaml": Template(
        ("buf.build/protocolbuffers/java", "buf.build/grpc/java"),
        "gen/java",
        "",
        {"java_package": "com.brook.v1", "java_multiple_files": True},
    ),
    "buf.gen.ts.yaml": Template(("buf.build/bufbuild/es",), "gen/ts", "target=ts", {}),
}


def _described_name(remote: str) -> str:
    return remote.removeprefix("buf.build/").replace("/", "-")


def _offline(template: dict[str, Any]) -> dict[str, Any]:
    """`template` with each remote plugin replaced by describe_plugin.py."""
    plugins = []
    for plugin in template["plugins"]:
        local = {key: value for key, value in plugin.items() if key != "remote"}
        local["local"] = [sys.executable, str(DESCRIBE_PLUGIN), _described_name(plugin["remote"])]
        plugins.append(local)
    return {**template, "plugins": plugins}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_template_generates_every_file_with_its_languages_options(
    name: str, tmp_path: Path
) -> None:
    assert BUF.exists(), "buf is not installed: run tools/install-dev"
    expected = TEMPLATES[name]
    template = yaml.safe_load((ROOT / name).read_text())
    assert tuple(p.get("remote") for p in template["plugins"]) == expected.plugins

    result = subprocess.run(
        [str(BUF), "generate", "--template", json.dumps(_offline(template)), "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"buf generate with {name} failed:\n{result.stderr}"

    for remote in expected.plugins:
        given = json.loads(
            (tmp_path / expected.out / f"{_described_name(remote)}.json").read_text()
        )
        assert given["parameter"] == expected.parameter, remote
        assert sorted(given["files"]) == CONTRACT, remote
        for proto, options in given["files"].items():
            assert {key: options[key] for key in expected.options} == expected.options, proto
