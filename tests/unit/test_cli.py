"""The `brook` command: service subcommands, `config docs`, and its registry of subcommands."""

from __future__ import annotations

import os

import pytest

from brook.cli import SERVICE_PACKAGES, build_parser, load_service_spec, main
from brook.config import ENV_PREFIX


@pytest.fixture
def no_brook_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("service", sorted(SERVICE_PACKAGES))
def test_config_docs_prints_every_setting_of_the_service(
    service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "docs", service]) == 0
    output = capsys.readouterr().out
    assert output.startswith("| Name | Type | Default | Valid values | Importance | Description |")
    for key in load_service_spec(service).config_def.keys:
        assert f"| `{key.name}` |" in output


def test_config_docs_rejects_an_unknown_service(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["config", "docs", "broker"])
    assert exited.value.code == 2
    assert "invalid choice: 'broker'" in capsys.readouterr().err


@pytest.mark.usefixtures("no_brook_environment")
def test_service_subcommand_with_a_bad_value_exits_2_with_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(
        ["storage-node", "--override", "node.id=1", "--override", "log.segment.bytes=ten"]
    )
    assert status == 2
    assert capsys.readouterr().err == (
        'brook storage-node: invalid configuration: log.segment.bytes="ten" is not an integer '
        "(from --override)\n"
    )


def test_every_service_spec_is_named_for_its_package() -> None:
    for name, package in SERVICE_PACKAGES.items():
        spec = load_service_spec(name)
        assert spec.name == name
        assert spec.prog == f"brook-{name}"
        assert package == "brook_" + name.replace("-", "_")


def test_subcommands_of_other_modules_are_registered() -> None:
    parser = build_parser()
    assert parser.parse_args(["cluster", "up"]).func.__module__ == "brook.launcher"
    assert parser.parse_args(["health", "127.0.0.1:9101"]).func.__module__ == "brook.health"
