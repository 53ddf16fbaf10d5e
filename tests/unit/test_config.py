"""The configuration machinery: sources and precedence, parsing, validators, messages, docs."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from brook.config import (
    METRICS_LISTENER,
    REQUIRED,
    Config,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    DerivedDefault,
    HostPortList,
    Listener,
    NonEmptyList,
    NonEmptyString,
    OneOf,
    Password,
    Range,
    RawSetting,
    Url,
    Voter,
    Voters,
    config_key_for_env,
    env_name_for_key,
    load_config,
    load_properties,
    parse_overrides,
    resolve_duration_ms,
    service_config_def,
    settings_from_env,
)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="brook-config-test-") as path:
        yield Path(path)


def _definition(*keys: ConfigKey) -> ConfigDef:
    return service_config_def(
        listener_names=("GRPC",), default_listeners="GRPC://127.0.0.1:9101", keys=keys
    )


SEGMENT_BYTES = ConfigKey(
    "log.segment.bytes", ConfigType.INT, 1073741824, "segment size", validator=Range(14)
)


def _parse(definition: ConfigDef, **settings: str) -> Config:
    raw = {
        name.replace("_", "."): RawSetting(value, "--override") for name, value in settings.items()
    }
    return definition.parse(raw)


def _problem(definition: ConfigDef, settings: Mapping[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        definition.parse({k: RawSetting(v, "--override") for k, v in settings.items()})
    return str(raised.value)


# --- sources and precedence -------------------------------------------------------------------


def test_each_source_overrides_the_ones_below_it(workdir: Path) -> None:
    definition = _definition(
        SEGMENT_BYTES,
        ConfigKey("log.roll.hours", ConfigType.INT, 168, "roll"),
        ConfigKey("log.retention.hours", ConfigType.INT, 168, "retention"),
        ConfigKey("num.partitions", ConfigType.INT, 1, "partitions"),
    )
    properties = workdir / "server.properties"
    properties.write_text(
        "node.id=1\nlog.segment.bytes=1000\nlog.roll.hours=10\nlog.retention.hours=20\n"
    )
    config = load_config(
        definition,
        config_path=properties,
        environ={"BROOK_LOG_SEGMENT_BYTES": "2000", "BROOK_LOG_ROLL_HOURS": "30"},
        overrides=["log.segment.bytes=3000"],
    )

    assert config.get_int("num.partitions") == 1
    assert config.source("num.partitions") == "default"
    assert config.get_int("log.retention.hours") == 20
    assert config.source("log.retention.hours") == f"{properties}:4"
    assert config.get_int("log.roll.hours") == 30
    assert config.source("log.roll.hours") == "environment BROOK_LOG_ROLL_HOURS"
    assert config.get_int("log.segment.bytes") == 3000
    assert config.source("log.segment.bytes") == "--override"


def test_config_file_is_optional_when_environment_and_overrides_suffice() -> None:
    config = load_config(_definition(), environ={"BROOK_NODE_ID": "4"})
    assert config.get_int("node.id") == 4


@pytest.mark.parametrize(
    ("key", "env_name"),
    [
        ("log.segment.bytes", "BROOK_LOG_SEGMENT_BYTES"),
        ("node.id", "BROOK_NODE_ID"),
        ("with_underscore.key", "BROOK_WITH__UNDERSCORE_KEY"),
        ("with-dash.key", "BROOK_WITH___DASH_KEY"),
        ("mixed_a-b.c", "BROOK_MIXED__A___B_C"),
    ],
)
def test_environment_names_map_to_keys_both_ways(key: str, env_name: str) -> None:
    assert env_name_for_key(key) == env_name
    assert config_key_for_env(env_name) == key


def test_only_brook_prefixed_environment_variables_are_settings() -> None:
    settings = settings_from_env(
        {"BROOK_LOG_SEGMENT_BYTES": "1", "PATH": "/bin", "BROOKLYN": "x", "BROOK_": "y"}
    )
    assert list(settings) == ["log.segment.bytes"]


def test_unknown_keys_are_collected_not_rejected() -> None:
    config = load_config(
        _definition(), environ={"BROOK_NOT_A_SETTING": "1"}, overrides=["node.id=1", "nope=2"]
    )
    assert config.unknown_keys == ("nope", "not.a.setting")
    assert config.unknown_key_source("not.a.setting") == "environment BROOK_NOT_A_SETTING"


def test_override_without_equals_sign_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r'--override "log\.segment\.bytes" is not of the form'):
        parse_overrides(["log.segment.bytes"])


def test_override_value_may_contain_equals_signs() -> None:
    assert parse_overrides(["a.b=x=y"])["a.b"].value == "x=y"


# --- properties files -------------------------------------------------------------------------


def test_properties_file_follows_java_properties_syntax(workdir: Path) -> None:
    path = workdir / "server.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   indented.key = spaced value  \n"
        "colon.key: colon value\n"
        "space.key space value\n"
        "continued.key = first, \\\n"
        "    second\n"
        "escaped\\=key = a\\tb\\u00e9\n"
        "empty.key=\n"
        "dup.key=1\n"
        "dup.key=2\n"
    )
    settings = {key: setting.value for key, setting in load_properties(path).items()}
    assert settings == {
        "indented.key": "spaced value  ",
        "colon.key": "colon value",
        "space.key": "space value",
        "continued.key": "first, second",
        "escaped=key": "a\tb\u00e9",
        "empty.key": "",
        "dup.key": "2",
    }
    assert load_properties(path)["colon.key"].source == f"{path}:5"


def test_properties_file_errors_name_the_file_and_line(workdir: Path) -> None:
    path = workdir / "bad.properties"
    path.write_text("ok=1\nbad=\\u12\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: malformed \\uXXXX escape"):
        load_properties(path)


def test_missing_properties_file_is_a_config_error(workdir: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read configuration file .*missing\.properties"):
        load_config(_definition(), config_path=workdir / "missing.properties", environ={})


# --- types ------------------------------------------------------------------------------------


def _typed_definition() -> ConfigDef:
    return ConfigDef(
        [
            ConfigKey("i", ConfigType.INT, 0, "int"),
            ConfigKey("l", ConfigType.LONG, 0, "long"),
            ConfigKey("d", ConfigType.DOUBLE, 0.5, "double"),
            ConfigKey("b", ConfigType.BOOLEAN, False, "boolean"),
            ConfigKey("s", ConfigType.STRING, None, "string"),
            ConfigKey("li", ConfigType.LIST, (), "list"),
            ConfigKey("p", ConfigType.PASSWORD, None, "password"),
        ]
    )


def test_values_are_parsed_into_their_declared_types() -> None:
    config = _parse(
        _typed_definition(),
        i=" -12 ",
        l="9223372036854775807",
        d="2.5",
        b="TRUE",
        s="  text ",
        li="a, b ,c",
        p=" secret ",
    )
    assert config.get_int("i") == -12
    assert config.get_int("l") == 2**63 - 1
    assert config.get_double("d") == 2.5
    assert config.get_bool("b") is True
    assert config.get_string("s") == "text"
    assert config.get_list("li") == ("a", "b", "c")
    assert config.get_password("p").value() == " secret "


@pytest.mark.parametrize(
    ("key", "written", "reason"),
    [
        ("i", "ten", "is not an integer"),
        ("i", "1.5", "is not an integer"),
        ("i", "1_000", "is not an integer"),
        ("i", "2147483648", "is outside the int range -2147483648..2147483647"),
        (
            "l",
            "9223372036854775808",
            "is outside the long range -9223372036854775808..9223372036854775807",
        ),
        ("d", "fast", "is not a number"),
        ("d", "nan", "is not a finite number"),
        ("b", "yes", "is not a boolean (expected true or false)"),
        ("li", "a,,b", "has an empty list entry"),
    ],
)
def test_malformed_values_are_rejected_naming_setting_value_and_reason(
    key: str, written: str, reason: str
) -> None:
    message = _problem(_typed_definition(), {key: written})
    assert message == f'{key}="{written}" {reason} (from --override)'


def test_empty_list_is_allowed_unless_validated() -> None:
    assert _parse(_typed_definition(), li="").get_list("li") == ()


class _RejectAll:
    def __call__(self, value: object) -> str:
        return "is rejected"

    def describe(self) -> str:
        return "nothing"


def test_password_values_never_appear_in_errors_or_repr() -> None:
    definition = ConfigDef(
        [ConfigKey("p", ConfigType.PASSWORD, REQUIRED, "secret", validator=_RejectAll())]
    )
    message = _problem(definition, {"p": "hunter2"})
    assert "hunter2" not in message
    assert message.startswith('p="[hidden]" ')
    assert "hunter2" not in repr(Password("hunter2"))
    assert str(Password("hunter2")) == "[hidden]"


def test_required_setting_missing_is_reported() -> None:
    assert _problem(_definition(), {}) == "node.id is required but was not set"


def test_every_problem_is_reported_on_one_line() -> None:
    message = _problem(_definition(SEGMENT_BYTES), {"log.segment.bytes": "ten"})
    assert message == (
        'node.id is required but was not set; log.segment.bytes="ten" is not an integer '
        "(from --override)"
    )
    assert "\n" not in message


def test_typed_accessors_refuse_the_wrong_type() -> None:
    config = _parse(_typed_definition())
    with pytest.raises(TypeError, match="i is a int, not boolean"):
        config.get_bool("i")
    with pytest.raises(TypeError, match="s has no value"):
        config.get_string("s")
    assert config.get_optional_string("s") is None
    with pytest.raises(KeyError):
        config.get_int("not.defined")


def test_config_cannot_be_modified() -> None:
    config = _parse(_typed_definition(), i="1")
    with pytest.raises(AttributeError):
        config.extra = 1  # type: ignore[attr-defined]
    values = config._values
    with pytest.raises(TypeError):
        values["i"] = 2  # type: ignore[index]
    assert config.get_int("i") == 1


# --- validators -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("validator", "value", "reason"),
    [
        (Range(14), 13, "is less than the minimum 14"),
        (Range(0, 100), 101, "is greater than the maximum 100"),
        (Range(0.0, 1.0), -0.5, "is less than the minimum 0"),
        (OneOf(("text", "json")), "xml", "is not one of text, json"),
        (OneOf(("delete", "compact")), ("delete", "purge"), "is not one of delete, compact"),
        (NonEmptyString(), "", "must not be empty"),
        (NonEmptyList(), (), "must list at least one entry"),
        (HostPortList(), ("localhost",), "'localhost' has no port"),
        (HostPortList(), ("h:99999",), "port 99999 is outside 1..65535"),
        (HostPortList(), ("::1:9092",), "write IPv6 addresses in brackets"),
        (HostPortList(), ("bad host:1",), "'bad host' is not a valid host name"),
        (Voters(), ("1@h:1", "1@h:2"), "voter id 1 appears more than once"),
        (Voters(), ("1@h:1", "2@h:1"), "address h:1 is used by more than one voter"),
        (Voters(), ("x@h:1",), "voter id 'x'"),
        (Voters(), ("h:1",), "'h:1' is not of the form id@host:port"),
        (Url(("http", "https")), "grpc://h:1", "has scheme grpc"),
        (Url(("http",)), "http://collector", "has no port"),
    ],
)
def test_validators_reject_with_a_reason(validator: object, value: object, reason: str) -> None:
    assert callable(validator)
    result = validator(value)
    assert isinstance(result, str)
    assert reason in result


@pytest.mark.parametrize(
    ("validator", "value"),
    [
        (Range(14), 14),
        (Range(None, 5), -(2**40)),
        (OneOf(("text", "json")), "json"),
        (HostPortList(), ("127.0.0.1:9201", "[::1]:9202", "controller-1.local:9203")),
        (Voters(), ("1@127.0.0.1:9301", "2@[::1]:9302")),
        (Url(("http", "https")), "https://collector.example:4317/path"),
    ],
)
def test_validators_accept_valid_values(validator: object, value: object) -> None:
    assert callable(validator)
    assert validator(value) is None


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("nonsense", "'nonsense' is not of the form NAME://host:port"),
        ("grpc://127.0.0.1:1", "listener name 'grpc'"),
        ("GRPC://:9101", "has no host"),
        ("GRPC://127.0.0.1:0", "port 0 is outside 1..65535"),
        ("GRPC://127.0.0.1:1,GRPC://127.0.0.1:2", "listener name GRPC appears more than once"),
        (
            "OTHER://127.0.0.1:1",
            "names unknown listener OTHER (this service has GRPC, RAFT; optional METRICS)",
        ),
        ("GRPC://127.0.0.1:1", "lacks the RAFT listener (this service needs GRPC, RAFT)"),
        (
            "GRPC://127.0.0.1:1,RAFT://127.0.0.1:1",
            "address 127.0.0.1:1 is used by more than one listener",
        ),
    ],
)
def test_listeners_are_validated_against_the_services_listener_names(
    written: str, reason: str
) -> None:
    definition = service_config_def(
        listener_names=("GRPC", "RAFT"),
        default_listeners="GRPC://127.0.0.1:9201,RAFT://127.0.0.1:9301",
        keys=(),
    )
    message = _problem(definition, {"node.id": "1", "listeners": written})
    assert message.startswith(f'listeners="{written}" ')
    assert reason in message


def test_listeners_parse_into_names_hosts_and_ports() -> None:
    config = _parse(
        service_config_def(
            listener_names=("GRPC", "RAFT"),
            default_listeners="GRPC://127.0.0.1:9201,RAFT://127.0.0.1:9301",
            keys=(),
        ),
        node_id="1",
        listeners="RAFT://[::1]:9301, GRPC://0.0.0.0:9201",
        advertised_listeners="GRPC://ctl-1:9201,RAFT://ctl-1:9301",
    )
    assert config.get_listeners() == (
        Listener("RAFT", "::1", 9301),
        Listener("GRPC", "0.0.0.0", 9201),
    )
    assert config.listener("RAFT").address == "[::1]:9301"
    assert str(config.listener("GRPC", advertised=True)) == "GRPC://ctl-1:9201"


def test_advertised_listeners_default_to_listeners() -> None:
    config = _parse(_definition(), node_id="1", listeners="GRPC://127.0.0.2:7000")
    assert config.listener("GRPC", advertised=True) == Listener("GRPC", "127.0.0.2", 7000)
    assert config.source("advertised.listeners") == "default (the value of listeners)"


def test_unroutable_address_cannot_be_advertised_even_by_default() -> None:
    message = _problem(_definition(), {"node.id": "1", "listeners": "GRPC://0.0.0.0:7000"})
    assert message == (
        'advertised.listeners="GRPC://0.0.0.0:7000" advertises GRPC://0.0.0.0:7000, an address '
        "clients cannot connect to; set advertised.listeners to a routable host (from default "
        "derived as the value of listeners)"
    )


def test_advertised_listeners_must_name_every_listener() -> None:
    definition = service_config_def(
        listener_names=("GRPC", "PLAINTEXT"),
        default_listeners="GRPC://127.0.0.1:1,PLAINTEXT://127.0.0.1:2",
        keys=(),
    )
    message = _problem(definition, {"node.id": "1", "advertised.listeners": "GRPC://a:1"})
    assert message.startswith('advertised.listeners="GRPC://a:1" lacks the PLAINTEXT listener')
    config = _parse(definition, node_id="1", advertised_listeners="GRPC://a:1,PLAINTEXT://a:2")
    assert config.listener("PLAINTEXT", advertised=True).host == "a"


def test_voters_parse_into_ids_and_addresses() -> None:
    definition = ConfigDef(
        [ConfigKey("controller.quorum.voters", ConfigType.LIST, REQUIRED, "", validator=Voters())]
    )
    config = _parse(definition, controller_quorum_voters="3@c3:9303,1@[::1]:9301")
    assert config.get_voters() == (Voter(3, "c3", 9303), Voter(1, "::1", 9301))
    assert config.get_voters()[1].address == "[::1]:9301"


def test_otlp_exporter_without_the_extra_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The extra is installed in the dev environment; hide it as if it were not.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    message = _problem(_definition(), {"node.id": "1", "telemetry.metrics.exporter": "otlp"})
    assert message == (
        'telemetry.metrics.exporter="otlp" needs the optional OTLP exporter, which is not '
        "installed (install it with: pip install 'brook[otlp]')"
    )


def test_otlp_exporter_with_the_extra_installed_is_accepted() -> None:
    config = _parse(_definition(), node_id="1", telemetry_traces_exporter="otlp")
    assert config.get_string("telemetry.traces.exporter") == "otlp"


# --- unit hierarchies -------------------------------------------------------------------------

_RETENTION = ConfigDef(
    [
        ConfigKey("log.retention.ms", ConfigType.LONG, None, ""),
        ConfigKey("log.retention.minutes", ConfigType.INT, None, ""),
        ConfigKey("log.retention.hours", ConfigType.INT, 168, ""),
    ]
)
_RETENTION_UNITS = (
    ("log.retention.ms", 1),
    ("log.retention.minutes", 60_000),
    ("log.retention.hours", 3_600_000),
)


@pytest.mark.parametrize(
    ("settings", "expected_ms"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "5"}, 300_000),
        ({"log.retention.minutes": "5", "log.retention.ms": "7"}, 7),
        ({"log.retention.hours": "1", "log.retention.ms": "-1"}, -1),
    ],
)
def test_the_finest_unit_set_wins(settings: dict[str, str], expected_ms: int) -> None:
    config = _RETENTION.parse({k: RawSetting(v, "test") for k, v in settings.items()})
    assert resolve_duration_ms(config, _RETENTION_UNITS) == expected_ms


# --- definitions and docs ---------------------------------------------------------------------


def test_a_default_that_fails_its_own_validator_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"default of x \(5\) is less than the minimum 10"):
        ConfigDef([ConfigKey("x", ConfigType.INT, 5, "", validator=Range(10))])
    with pytest.raises(ValueError, match="default of y is '5', not a int"):
        ConfigDef([ConfigKey("y", ConfigType.INT, "5", "")])


def test_a_key_defined_twice_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="configuration key x is defined twice"):
        ConfigDef([ConfigKey("x", ConfigType.INT, 1, ""), ConfigKey("x", ConfigType.INT, 2, "")])


def test_derived_defaults_are_computed_from_other_settings_and_validated() -> None:
    definition = ConfigDef(
        [
            ConfigKey("node.id", ConfigType.INT, REQUIRED, ""),
            ConfigKey(
                "data.dirs",
                ConfigType.LIST,
                DerivedDefault("dir-<node.id>", lambda values: f"dir-{values['node.id']},x"),
                "",
                validator=OneOf(("dir-7", "x")),
            ),
        ]
    )
    assert _parse(definition, node_id="7").get_list("data.dirs") == ("dir-7", "x")
    assert "is not one of dir-7, x (from default derived as dir-<node.id>)" in _problem(
        definition, {"node.id": "8"}
    )


def test_markdown_table_documents_every_key() -> None:
    definition = ConfigDef(
        [
            ConfigKey("a.required", ConfigType.INT, REQUIRED, "needed", validator=Range(0)),
            ConfigKey("b.list", ConfigType.LIST, ("x", "y"), "pipes | escaped"),
            ConfigKey("c.null", ConfigType.STRING, None, "optional", validator=OneOf(("p", "q"))),
            ConfigKey("d.secret", ConfigType.PASSWORD, Password("s3"), "secret"),
            ConfigKey("e.empty", ConfigType.STRING, "", "empty"),
        ]
    )
    lines = definition.to_markdown().splitlines()
    assert lines[0] == "| Name | Type | Default | Valid values | Importance | Description |"
    assert lines[2] == "| `a.required` | int | (required) | [0,...] | medium | needed |"
    assert lines[3] == "| `b.list` | list | `x,y` |  | medium | pipes \\| escaped |"
    assert lines[4] == "| `c.null` | string | `null` | [p, q] | medium | optional |"
    assert lines[5] == "| `d.secret` | password | [hidden] |  | medium | secret |"
    assert lines[6] == '| `e.empty` | string | "" |  | medium | empty |'
    assert len(lines) == 7


def test_non_default_items_hide_passwords() -> None:
    config = _parse(_typed_definition(), i="3", p="hunter2")
    assert config.non_default_items() == (("i", "3", "--override"), ("p", "[hidden]", "--override"))
    assert config.describe("p") == 'p="[hidden]"'


def test_the_metrics_listener_is_optional_for_every_service() -> None:
    definition = service_config_def(
        listener_names=("GRPC",), default_listeners="GRPC://127.0.0.1:9101", keys=()
    )
    without = _parse(definition, node_id="1")
    assert without.optional_listener(METRICS_LISTENER) is None
    with_metrics = _parse(
        definition, node_id="1", listeners="GRPC://127.0.0.1:9101,METRICS://127.0.0.1:10101"
    )
    assert with_metrics.optional_listener(METRICS_LISTENER) == Listener(
        METRICS_LISTENER, "127.0.0.1", 10101
    )
