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


def test_groups_reset_offsets_with_a_bad_datetime_exits_2_before_asking_the_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 1 has no controller: reaching the cluster would fail with exit status 1, not 2.
    status = main(
        [
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-datetime",
            "2026-13-45T00:00",
            "--execute",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--timeout-ms",
            "1000",
        ]
    )
    assert status == 2
    assert "--to-datetime '2026-13-45T00:00' is not an ISO 8601 date and time" in (
        capsys.readouterr().err
    )


def test_groups_reset_offsets_of_an_empty_topic_name_exits_2_before_asking_the_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    arguments = ["groups", "reset-offsets", "g", "--topic", "", "--to-latest", "--execute"]
    status = main([*arguments, "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "1000"])
    assert status == 2
    assert "topics must name at least one topic, with no empty name" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments",
    [
        ["reset-offsets", "g", "--topic", "t"],
        ["reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["reset-offsets", "g", "--to-earliest"],
        ["reset-offsets", "g", "--topic", "t", "--to-latest", "--dry-run", "--execute"],
        ["list", "--state", "Running"],
        ["delete"],
    ],
)
def test_groups_usage_errors_exit_2(arguments: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["groups", *arguments])
    assert exited.value.code == 2


def test_version_prints_the_installed_packages_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"brook {importlib.metadata.version('brook')}\n"
