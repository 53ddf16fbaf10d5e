"""Typed configuration for every Brook process, in the spirit of Kafka's ConfigDef.

A service declares its settings as `ConfigKey`s in a `ConfigDef`; `load_config` reads them from,
lowest to highest precedence, the built-in defaults, a Kafka-style properties file, the
environment (`BROOK_` + the name with `.`->`_`, `_`->`__`, `-`->`___`, Kafka's docker-image
convention) and `--override key=value` flags, then parses and validates every value and returns an
immutable `Config`. Anything wrong becomes one `ConfigError` whose message names the setting, the
value, where the value came from and why it was rejected; nothing is started before that.

The keys every service shares live here (`common_keys`); each service adds its own in its
package's config.py.
"""

from __future__ import annotations

import enum
import importlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final, Protocol

from brook.rpc.addresses import format_address, parse_address
from brook.security.principal import Principal

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

ENV_PREFIX: Final = "BROOK_"


class ConfigType(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Password:
    """A secret value: never shown by repr, str, error messages or logs."""

    __slots__ = ("_value",)

    HIDDEN: Final = "[hidden]"

    def __init__(self, value: str) -> None:
        self._value = value

    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Password({self.HIDDEN})"

    def __str__(self) -> str:
        return self.HIDDEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


ConfigValue = int | float | bool | str | tuple[str, ...] | Password | None


class _Required:
    """Marker default: the setting has no default and must be given."""

    _instance: _Required | None = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True)
class DerivedDefault:
    """A default computed from other, already parsed settings (e.g. a data dir named by node.id).

    `description` is what the docs show as the default; `compute` receives the parsed values of
    every non-derived setting and returns the default as it would be written in a properties
    file, which is then parsed and validated like any written value.
    """

    description: str
    compute: Callable[[Mapping[str, ConfigValue]], str]


class Validator(Protocol):
    """Checks one parsed, non-null value. Returns None if valid, else the reason it is not.

    The reason completes the sentence `name="value" ...`, e.g. "is less than the minimum 14".
    """

    def __call__(self, value: ConfigValue) -> str | None: ...

    def describe(self) -> str:
        """What the docs' "valid values" column shows."""
        ...


ConfigCheck = Callable[["Config"], str | None]
"""A rule over several settings; returns a complete message naming them if violated."""


# ---------------------------------------------------------------------------------------------
# Structured values: listeners, host:port lists, voter lists


class _Address:
    host: str
    port: int

    @property
    def address(self) -> str:
        """host:port, IPv6 hosts bracketed: what grpc and socket APIs take."""
        return format_address(self.host, self.port)


@dataclass(frozen=True)
class HostPort(_Address):
    host: str
    port: int

    def __str__(self) -> str:
        return self.address


@dataclass(frozen=True)
class Listener(_Address):
    """One entry of `listeners` / `advertised.listeners`: NAME://host:port."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


@dataclass(frozen=True)
class Voter(_Address):
    """One entry of `controller.quorum.voters`: id@host:port."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.address}"


_LISTENER_NAME_RE: Final = re.compile(r"^[A-Z][A-Z0-9_]*$")
_UNROUTABLE_HOSTS: Final = frozenset({"0.0.0.0", "::"})


def parse_host_port(text: str) -> HostPort:
    """Parses host:port ([v6]:port for IPv6). Raises ValueError with the reason."""
    host, sep, _ = text.rpartition(":")
    if sep and not host:
        raise ValueError(
            f"'{text}' has no host (expected host:port; 0.0.0.0 means every interface)"
        )
    return HostPort(*parse_address(text))


def parse_listeners(entries: Iterable[str]) -> tuple[Listener, ...]:
    """Parses Kafka listener syntax entries NAME://host:port. Raises ValueError with the reason."""
    listeners: list[Listener] = []
    for entry in entries:
        name, sep, rest = entry.partition("://")
        if not sep:
            raise ValueError(f"'{entry}' is not of the form NAME://host:port")
        if not _LISTENER_NAME_RE.match(name):
            raise ValueError(
                f"listener name '{name}' in '{entry}' must be upper-case letters, digits and _"
            )
        try:
            host_port = parse_host_port(rest)
        except ValueError as e:
            raise ValueError(f"listener '{entry}': {e}") from None
        listeners.append(Listener(name, host_port.host, host_port.port))
    seen_names: set[str] = set()
    seen_addresses: set[str] = set()
    for listener in listeners:
        if listener.name in seen_names:
            raise ValueError(f"listener name {listener.name} appears more than once")
        if listener.address in seen_addresses:
            raise ValueError(f"address {listener.address} is used by more than one listener")
        seen_names.add(listener.name)
        seen_addresses.add(listener.address)
    return tuple(listeners)


def parse_voters(entries: Iterable[str]) -> tuple[Voter, ...]:
    """Parses `id@host:port` entries. Raises ValueError with the reason."""
    voters: list[Voter] = []
    for entry in entries:
        id_text, sep, rest = entry.partition("@")
        if not sep:
            raise ValueError(f"'{entry}' is not of the form id@host:port")
        if not id_text.isdigit() or int(id_text) > INT32_MAX:
            raise ValueError(f"voter id '{id_text}' in '{entry}' is not a node id (0..{INT32_MAX})")
        try:
            host_port = parse_host_port(rest)
        except ValueError as e:
            raise ValueError(f"voter '{entry}': {e}") from None
        voters.append(Voter(int(id_text), host_port.host, host_port.port))
    ids = [voter.node_id for voter in voters]
    duplicate_ids = sorted({i for i in ids if ids.count(i) > 1})
    if duplicate_ids:
        raise ValueError(f"voter id {duplicate_ids[0]} appears more than once")
    addresses = [voter.address for voter in voters]
    duplicate_addresses = sorted({a for a in addresses if addresses.count(a) > 1})
    if duplicate_addresses:
        raise ValueError(f"address {duplicate_addresses[0]} is used by more than one voter")
    return tuple(voters)


# ---------------------------------------------------------------------------------------------
# Validators


@dataclass(frozen=True)
class Range:
    """Numeric bounds, inclusive; None means unbounded on that side."""

    min_value: float | None = None
    max_value: float | None = None

    def __call__(self, value: ConfigValue) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "is not a number"
        if self.min_value is not None and value < self.min_value:
            return f"is less than the minimum {_number(self.min_value)}"
        if self.max_value is not None and value > self.max_value:
            return f"is greater than the maximum {_number(self.max_value)}"
        return None

    def describe(self) -> str:
        low = "..." if self.min_value is None else _number(self.min_value)
        if self.max_value is None:
            return f"[{low},...]"
        return f"[{low},...,{_number(self.max_value)}]"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class OneOf:
    """The value (or, for lists, every item) must be one of `allowed` (case-sensitive)."""

    allowed: tuple[str, ...]

    def __call__(self, value: ConfigValue) -> str | None:
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if item not in self.allowed:
                return f"is not one of {', '.join(self.allowed)}"
        return None

    def describe(self) -> str:
        return f"[{', '.join(self.allowed)}]"


@dataclass(frozen=True)
class NonEmptyString:
    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, str) or not value:
            return "must not be empty"
        return None

    def describe(self) -> str:
        return "non-empty string"


@dataclass(frozen=True)
class NonEmptyList:
    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple) or not value:
            return "must list at least one entry"
        return None

    def describe(self) -> str:
        return "non-empty list"


@dataclass(frozen=True)
class Listeners:
    """A Kafka listener list restricted to this service's listener names: every one of `names`
    present, any of `optional` allowed."""

    names: tuple[str, ...]
    advertised: bool = False
    optional: tuple[str, ...] = ()

    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple):
            return "is not a list"
        try:
            listeners = parse_listeners(value)
        except ValueError as e:
            return f"is not a valid listener list: {e}"
        given = {listener.name for listener in listeners}
        unknown = sorted(given - {*self.names, *self.optional})
        if unknown:
            optional = f"; optional {', '.join(self.optional)}" if self.optional else ""
            return (
                f"names unknown listener {unknown[0]} "
                f"(this service has {', '.join(self.names)}{optional})"
            )
        missing = [name for name in self.names if name not in given]
        if missing:
            return f"lacks the {missing[0]} listener (this service needs {', '.join(self.names)})"
        if self.advertised:
            for listener in listeners:
                if listener.host in _UNROUTABLE_HOSTS:
                    return (
                        f"advertises {listener}, an address clients cannot connect to; "
                        "set advertised.listeners to a routable host"
                    )
        return None

    def describe(self) -> str:
        optional = "".join(f" (optional {name})" for name in self.optional)
        return "NAME://host:port,... with listeners " + ", ".join(self.names) + optional


@dataclass(frozen=True)
class HostPortList:
    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple) or not value:
            return "must list at least one host:port"
        for entry in value:
            try:
                parse_host_port(entry)
            except ValueError as e:
                return f"is not a valid host:port list: {e}"
        return None

    def describe(self) -> str:
        return "host:port,..."


@dataclass(frozen=True)
class Voters:
    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple) or not value:
            return "must list at least one id@host:port"
        try:
            parse_voters(value)
        except ValueError as e:
            return f"is not a valid voter list: {e}"
        return None

    def describe(self) -> str:
        return "id@host:port,..."


_URL_RE: Final = re.compile(
    r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<rest>[^/?#]+)(?P<path>[/?#].*)?$"
)


@dataclass(frozen=True)
class Url:
    schemes: tuple[str, ...]

    def __call__(self, value: ConfigValue) -> str | None:
        match = _URL_RE.match(value) if isinstance(value, str) else None
        if match is None:
            return "is not a URL of the form scheme://host:port"
        if match["scheme"] not in self.schemes:
            return f"has scheme {match['scheme']}, expected one of {', '.join(self.schemes)}"
        try:
            parse_host_port(match["rest"])
        except ValueError as e:
            return f"is not a valid URL: {e}"
        return None

    def describe(self) -> str:
        return " or ".join(f"{scheme}://host:port" for scheme in self.schemes)


# ---------------------------------------------------------------------------------------------
# Keys and definitions


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: ConfigValue | _Required | DerivedDefault
    doc: str
    importance: Importance = Importance.MEDIUM
    validator: Validator | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class ConfigError(Exception):
    """Invalid configuration. `problems` are complete, single-line messages."""

    def __init__(self, problems: Sequence[str]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class RawSetting:
    """A value as written, before parsing, and where it was written (for error messages)."""

    value: str
    source: str


class ConfigDef:
    """An ordered, immutable set of setting definitions plus rules that span several settings."""

    def __init__(self, keys: Iterable[ConfigKey], checks: Iterable[ConfigCheck] = ()) -> None:
        by_name: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in by_name:
                raise ValueError(f"configuration key {key.name} is defined twice")
            _check_default(key)
            by_name[key.name] = key
        self._keys: Mapping[str, ConfigKey] = MappingProxyType(by_name)
        self._checks = tuple(checks)

    @property
    def keys(self) -> tuple[ConfigKey, ...]:
        return tuple(self._keys.values())

    @property
    def checks(self) -> tuple[ConfigCheck, ...]:
        return self._checks

    def key(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def parse(self, raw: Mapping[str, RawSetting]) -> Config:
        """Parses and validates; raises ConfigError listing every problem found."""
        problems: list[str] = []
        values: dict[str, ConfigValue] = {}
        sources: dict[str, str] = {}
        derived: list[ConfigKey] = []
        for key in self._keys.values():
            setting = raw.get(key.name)
            if setting is not None:
                sources[key.name] = setting.source
                value, problem = _parse_and_validate(key, setting)
                if problem is not None:
                    problems.append(problem)
                else:
                    values[key.name] = value
            elif isinstance(key.default, DerivedDefault):
                derived.append(key)
            elif key.required:
                problems.append(f"{key.name} is required but was not set")
            else:
                assert not isinstance(key.default, _Required)
                values[key.name] = key.default
                sources[key.name] = "default"
        if problems:
            raise ConfigError(problems)
        for key in derived:
            assert isinstance(key.default, DerivedDefault)
            setting = RawSetting(
                key.default.compute(values), f"default derived as {key.default.description}"
            )
            value, problem = _parse_and_validate(key, setting)
            if problem is not None:
                problems.append(problem)
            values[key.name] = value
            sources[key.name] = f"default ({key.default.description})"
        unknown = {name: setting for name, setting in raw.items() if name not in self._keys}
        config = Config(self, values, sources, unknown)
        if not problems:
            problems.extend(p for check in self._checks if (p := check(config)) is not None)
        if problems:
            raise ConfigError(problems)
        return config

    def to_markdown(self) -> str:
        """A Markdown table of every key: name, type, default, valid values, importance, doc."""
        lines = [
            "| Name | Type | Default | Valid values | Importance | Description |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for key in self._keys.values():
            valid = key.validator.describe() if key.validator else ""
            cells = (
                f"`{key.name}`",
                key.type.value,
                _describe_default(key),
                valid,
                key.importance.value,
                key.doc,
            )
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        return "\n".join(lines) + "\n"


def _parse_and_validate(key: ConfigKey, setting: RawSetting) -> tuple[ConfigValue, str | None]:
    """(value, None) if valid, else (None, the complete problem message)."""
    try:
        value = _parse_value(key.type, setting.value)
    except ValueError as e:
        reason: str | None = str(e)
    else:
        reason = key.validator(value) if key.validator and value is not None else None
        if reason is None:
            return value, None
    return None, f"{key.name}={_quote_raw(key, setting.value)} {reason} (from {setting.source})"


_INTEGER_RE: Final = re.compile(r"^[+-]?[0-9]+$")


def _parse_value(config_type: ConfigType, text: str) -> ConfigValue:
    """Parses the written form. Raises ValueError whose text completes `name="value" ...`."""
    trimmed = text.strip()
    if config_type in (ConfigType.INT, ConfigType.LONG):
        if not _INTEGER_RE.match(trimmed):
            raise ValueError("is not an integer")
        number = int(trimmed)
        low, high = (
            (INT32_MIN, INT32_MAX) if config_type is ConfigType.INT else (INT64_MIN, INT64_MAX)
        )
        if not low <= number <= high:
            raise ValueError(f"is outside the {config_type.value} range {low}..{high}")
        return number
    if config_type is ConfigType.DOUBLE:
        try:
            number_f = float(trimmed)
        except ValueError:
            raise ValueError("is not a number") from None
        if number_f != number_f or number_f in (float("inf"), float("-inf")):
            raise ValueError("is not a finite number")
        return number_f
    if config_type is ConfigType.BOOLEAN:
        lowered = trimmed.lower()
        if lowered not in ("true", "false"):
            raise ValueError("is not a boolean (expected true or false)")
        return lowered == "true"
    if config_type is ConfigType.STRING:
        return trimmed
    if config_type is ConfigType.PASSWORD:
        return Password(text)
    assert config_type is ConfigType.LIST
    if not trimmed:
        return ()
    items = tuple(item.strip() for item in trimmed.split(","))
    if "" in items:
        raise ValueError("has an empty list entry")
    return items


def _quote_raw(key: ConfigKey, text: str) -> str:
    if key.type is ConfigType.PASSWORD:
        return f'"{Password.HIDDEN}"'
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quote(key: ConfigKey, value: ConfigValue) -> str:
    return _quote_raw(key, _format_value(value))


def _format_value(value: ConfigValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _check_default(key: ConfigKey) -> None:
    """Defaults are code: a default that fails its own definition is a programming error."""
    default = key.default
    if default is REQUIRED or isinstance(default, DerivedDefault) or default is None:
        return
    expected: tuple[type, ...] = {
        ConfigType.INT: (int,),
        ConfigType.LONG: (int,),
        ConfigType.DOUBLE: (float, int),
        ConfigType.BOOLEAN: (bool,),
        ConfigType.STRING: (str,),
        ConfigType.LIST: (tuple,),
        ConfigType.PASSWORD: (Password,),
    }[key.type]
    if not isinstance(default, expected) or (
        isinstance(default, bool) and key.type is not ConfigType.BOOLEAN
    ):
        raise ValueError(f"default of {key.name} is {default!r}, not a {key.type.value}")
    assert not isinstance(default, _Required)
    reason = key.validator(default) if key.validator else None
    if reason:
        raise ValueError(f"default of {key.name} ({default!r}) {reason}")


def _describe_default(key: ConfigKey) -> str:
    if key.required:
        return "(required)"
    if isinstance(key.default, DerivedDefault):
        return key.default.description
    if key.type is ConfigType.PASSWORD and key.default is not None:
        return Password.HIDDEN
    assert not isinstance(key.default, _Required)
    text = _format_value(key.default)
    return f"`{text}`" if text else '""'


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------------------------
# Parsed configuration


class Config:
    """Parsed, validated, immutable settings with typed accessors.

    Typed accessors assert the key's declared type: asking for the wrong type, or for a key the
    service did not define, is a programming error and raises KeyError/TypeError.
    """

    __slots__ = ("_definition", "_sources", "_unknown", "_values")

    def __init__(
        self,
        definition: ConfigDef,
        values: Mapping[str, ConfigValue],
        sources: Mapping[str, str],
        unknown: Mapping[str, RawSetting],
    ) -> None:
        self._definition = definition
        self._values: Mapping[str, ConfigValue] = MappingProxyType(dict(values))
        self._sources: Mapping[str, str] = MappingProxyType(dict(sources))
        self._unknown: Mapping[str, RawSetting] = MappingProxyType(dict(unknown))

    @property
    def definition(self) -> ConfigDef:
        return self._definition

    @property
    def unknown_keys(self) -> tuple[str, ...]:
        """Keys that were set but that this service does not define (Kafka warns, not fails)."""
        return tuple(sorted(self._unknown))

    def unknown_key_source(self, name: str) -> str:
        return self._unknown[name].source

    def source(self, name: str) -> str:
        """Where the value came from: "default", "--override", "environment BROOK_X", a file."""
        return self._sources[name]

    def get(self, name: str) -> ConfigValue:
        return self._values[name]

    def is_set(self, name: str) -> bool:
        """True if the setting has a non-null value (given, or defaulted)."""
        return self._values[name] is not None

    def _typed(self, name: str, *types: ConfigType) -> ConfigValue:
        key = self._definition.key(name)
        if key.type not in types:
            raise TypeError(f"{name} is a {key.type.value}, not {'/'.join(t.value for t in types)}")
        return self._values[name]

    def get_int(self, name: str) -> int:
        value = self._typed(name, ConfigType.INT, ConfigType.LONG)
        if not isinstance(value, int):
            raise TypeError(f"{name} has no value")
        return value

    def get_optional_int(self, name: str) -> int | None:
        value = self._typed(name, ConfigType.INT, ConfigType.LONG)
        assert value is None or isinstance(value, int)
        return value

    def get_double(self, name: str) -> float:
        value = self._typed(name, ConfigType.DOUBLE)
        if not isinstance(value, int | float):
            raise TypeError(f"{name} has no value")
        return float(value)

    def get_bool(self, name: str) -> bool:
        value = self._typed(name, ConfigType.BOOLEAN)
        if not isinstance(value, bool):
            raise TypeError(f"{name} has no value")
        return value

    def get_string(self, name: str) -> str:
        value = self._typed(name, ConfigType.STRING)
        if not isinstance(value, str):
            raise TypeError(f"{name} has no value")
        return value

    def get_optional_string(self, name: str) -> str | None:
        value = self._typed(name, ConfigType.STRING)
        assert value is None or isinstance(value, str)
        return value

    def get_list(self, name: str) -> tuple[str, ...]:
        value = self._typed(name, ConfigType.LIST)
        if not isinstance(value, tuple):
            raise TypeError(f"{name} has no value")
        return value

    def get_password(self, name: str) -> Password:
        value = self._typed(name, ConfigType.PASSWORD)
        if not isinstance(value, Password):
            raise TypeError(f"{name} has no value")
        return value

    def get_listeners(self, name: str = "listeners") -> tuple[Listener, ...]:
        return parse_listeners(self.get_list(name))

    def listener(self, listener_name: str, *, advertised: bool = False) -> Listener:
        """The listener called `listener_name` (e.g. "GRPC") from listeners/advertised.listeners."""
        key = "advertised.listeners" if advertised else "listeners"
        for listener in self.get_listeners(key):
            if listener.name == listener_name:
                return listener
        raise KeyError(f"{key} has no {listener_name} listener")

    def optional_listener(self, listener_name: str) -> Listener | None:
        """The listener called `listener_name` from listeners, None if it is not configured
        (for a listener a service may run without, such as METRICS)."""
        for listener in self.get_listeners():
            if listener.name == listener_name:
                return listener
        return None

    def get_host_ports(self, name: str) -> tuple[HostPort, ...]:
        return tuple(parse_host_port(entry) for entry in self.get_list(name))

    def get_voters(self, name: str = "controller.quorum.voters") -> tuple[Voter, ...]:
        return parse_voters(self.get_list(name))

    def describe(self, name: str) -> str:
        """name="value" (passwords hidden), for log lines."""
        return f"{name}={_quote(self._definition.key(name), self._values[name])}"

    def non_default_items(self) -> tuple[tuple[str, str, str], ...]:
        """(name, shown value, source) of every setting not at its default; passwords hidden."""
        items = []
        for key in self._definition.keys:
            source = self._sources[key.name]
            if not source.startswith("default"):
                shown = _format_value(self._values[key.name])
                if key.type is ConfigType.PASSWORD:
                    shown = Password.HIDDEN
                items.append((key.name, shown, source))
        return tuple(items)


def resolve_duration_ms(config: Config, keys: Sequence[tuple[str, int]]) -> int:
    """Kafka's unit hierarchy: the first of `keys` that is set wins, scaled to milliseconds
    (log.retention.ms > log.retention.minutes > log.retention.hours). `keys` are (name,
    milliseconds per unit) in precedence order; the last one should have a default."""
    for name, unit_ms in keys:
        value = config.get_optional_int(name)
        if value is not None:
            return value * unit_ms
    raise KeyError(f"none of {', '.join(name for name, _ in keys)} is set")


# ---------------------------------------------------------------------------------------------
# Sources: properties file, environment, --override


def load_properties(path: Path) -> dict[str, RawSetting]:
    """Reads a Kafka server.properties-style file (java.util.Properties syntax).

    `key=value` or `key: value` (also `key value`), `#`/`!` comment lines, blank lines, a trailing
    backslash continues a line, and the escapes \\t \\n \\r \\f \\uXXXX and backslash-anything.
    Raises ConfigError naming the file and line for anything it cannot read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([f"cannot read configuration file {path}: {e.strerror or e}"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"configuration file {path} is not UTF-8 text: {e.reason}"]) from None
    settings: dict[str, RawSetting] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line_number = index + 1
        logical = lines[index].lstrip()
        index += 1
        if not logical or logical[0] in "#!":
            continue
        while _ends_with_continuation(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip()
            index += 1
        if _ends_with_continuation(logical):
            logical = logical[:-1]
        try:
            key, value = _split_property(logical)
        except ValueError as e:
            raise ConfigError([f"{path}:{line_number}: {e}"]) from None
        if not key:
            raise ConfigError([f"{path}:{line_number}: a line has a value but no key"])
        settings[key] = RawSetting(value, f"{path}:{line_number}")
    return settings


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


_PROPERTY_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _split_property(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            decoded, i = _unescape_at(line, i)
            key_chars.append(decoded)
            continue
        if ch in "=: \t\f":
            break
        key_chars.append(ch)
        i += 1
    # Separator: optional whitespace, at most one of = or :, optional whitespace.
    while i < len(line) and line[i] in " \t\f":
        i += 1
    if i < len(line) and line[i] in "=:":
        i += 1
    while i < len(line) and line[i] in " \t\f":
        i += 1
    value_chars: list[str] = []
    while i < len(line):
        if line[i] == "\\":
            decoded, i = _unescape_at(line, i)
            value_chars.append(decoded)
        else:
            value_chars.append(line[i])
            i += 1
    return "".join(key_chars), "".join(value_chars)


def _unescape_at(line: str, i: int) -> tuple[str, int]:
    """Decodes the escape starting at line[i] == '\\'; returns (text, next index)."""
    if i + 1 >= len(line):
        return "", i + 1
    ch = line[i + 1]
    if ch == "u":
        digits = line[i + 2 : i + 6]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise ValueError(f"malformed \\uXXXX escape '\\u{digits}'")
        return chr(int(digits, 16)), i + 6
    return _PROPERTY_ESCAPES.get(ch, ch), i + 2


def env_name_for_key(name: str) -> str:
    """log.segment.bytes -> BROOK_LOG_SEGMENT_BYTES (`_`->`__`, `-`->`___`, `.`->`_`)."""
    return ENV_PREFIX + name.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def config_key_for_env(env_name: str) -> str | None:
    """BROOK_LOG_SEGMENT_BYTES -> log.segment.bytes; None if not a BROOK_ variable.

    Same order as Kafka's docker image: `___`->`-` first, then `__`->`_`, then `_`->`.`.
    """
    if not env_name.startswith(ENV_PREFIX) or len(env_name) == len(ENV_PREFIX):
        return None
    body = env_name[len(ENV_PREFIX) :].lower()
    parts = [chunk.replace("__", "\0").replace("_", ".") for chunk in body.split("___")]
    return "-".join(parts).replace("\0", "_")


def settings_from_env(environ: Mapping[str, str]) -> dict[str, RawSetting]:
    settings: dict[str, RawSetting] = {}
    for env_name in sorted(environ):
        key = config_key_for_env(env_name)
        if key is not None:
            settings[key] = RawSetting(environ[env_name], f"environment {env_name}")
    return settings


def parse_overrides(overrides: Iterable[str]) -> dict[str, RawSetting]:
    settings: dict[str, RawSetting] = {}
    for override in overrides:
        key, sep, value = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError([f'--override "{override}" is not of the form key=value'])
        settings[key] = RawSetting(value, "--override")
    return settings


def load_config(
    definition: ConfigDef,
    *,
    config_path: Path | None = None,
    overrides: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Config:
    """defaults < properties file < environment < overrides; raises ConfigError."""
    raw: dict[str, RawSetting] = {}
    if config_path is not None:
        raw.update(load_properties(config_path))
    raw.update(settings_from_env(os.environ if environ is None else environ))
    raw.update(parse_overrides(overrides))
    return definition.parse(raw)


# ---------------------------------------------------------------------------------------------
# Keys every service shares

LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS: Final = ("text", "json")
TELEMETRY_EXPORTERS: Final = ("none", "console", "otlp")
OTLP_EXPORTER_MODULE: Final = "opentelemetry.exporter.otlp.proto.grpc"
METRICS_LISTENER: Final = "METRICS"
"""The optional listener every service may have: Prometheus's /metrics over HTTP. By convention
(defaults, `brook cluster up`) its port is the process's GRPC port + 1000."""


def _advertised_default(values: Mapping[str, ConfigValue]) -> str:
    return _format_value(values["listeners"])


def _check_otlp_available(config: Config) -> str | None:
    for key in ("telemetry.traces.exporter", "telemetry.metrics.exporter"):
        if config.get_string(key) == "otlp":
            try:
                importlib.import_module(OTLP_EXPORTER_MODULE)
            except ImportError:
                return (
                    f'{key}="otlp" needs the optional OTLP exporter, which is not installed '
                    "(install it with: pip install 'brook[otlp]')"
                )
    return None


def common_keys(
    *,
    listener_names: tuple[str, ...],
    default_listeners: str,
    optional_listener_names: tuple[str, ...] = (),
) -> tuple[tuple[ConfigKey, ...], tuple[ConfigCheck, ...]]:
    """The settings every Brook service has, and the rules that span them.
    ``optional_listener_names``: listeners the service may have besides METRICS."""
    optional = (*optional_listener_names, METRICS_LISTENER)
    listeners_validator = Listeners(listener_names, optional=optional)
    keys = (
        ConfigKey(
            "node.id",
            ConfigType.INT,
            REQUIRED,
            "The id of this process, unique among the processes of its kind in the cluster. "
            "It names the node in metadata, logs (node_id) and telemetry (service.instance.id).",
            Importance.HIGH,
            Range(0),
        ),
        ConfigKey(
            "listeners",
            ConfigType.LIST,
            tuple(default_listeners.split(",")),
            "Where this process listens, in Kafka's listener syntax NAME://host:port, "
            "comma-separated. Every service has a GRPC listener (its gRPC services and the "
            "standard grpc.health.v1.Health service). Any service may have a METRICS listener: "
            "Prometheus's /metrics over HTTP (docs/metrics.md); without one there is no "
            "endpoint. Use 0.0.0.0 as host to listen on every interface. Listener names are "
            "fixed per service; see valid values.",
            Importance.HIGH,
            listeners_validator,
        ),
        ConfigKey(
            "advertised.listeners",
            ConfigType.LIST,
            DerivedDefault("the value of listeners", _advertised_default),
            "The addresses other processes and clients are told to use, same syntax and "
            "listener names as listeners. Set it when the bind address is not the address "
            "others reach (containers, 0.0.0.0); 0.0.0.0 and :: cannot be advertised.",
            Importance.HIGH,
            Listeners(listener_names, advertised=True, optional=optional),
        ),
        ConfigKey(
            "logging.level",
            ConfigType.STRING,
            "INFO",
            "The lowest level of log record written to stderr.",
            Importance.MEDIUM,
            OneOf(LOG_LEVELS),
        ),
        ConfigKey(
            "logging.format",
            ConfigType.STRING,
            "text",
            "The format of log lines on stderr: text is logfmt (key=value pairs), json is one "
            "JSON object per line. Every line has ts, level, logger, service, node_id, msg and "
            "any extra fields.",
            Importance.LOW,
            OneOf(LOG_FORMATS),
        ),
        ConfigKey(
            "telemetry.traces.exporter",
            ConfigType.STRING,
            "none",
            "Where OpenTelemetry spans go: none (spans are not recorded; trace context still "
            "propagates), console (stdout) or otlp (telemetry.otlp.endpoint; needs the "
            "brook[otlp] extra).",
            Importance.MEDIUM,
            OneOf(TELEMETRY_EXPORTERS),
        ),
        ConfigKey(
            "telemetry.metrics.exporter",
            ConfigType.STRING,
            "none",
            "Where OpenTelemetry metrics go: none, console (stdout) or otlp "
            "(telemetry.otlp.endpoint; needs the brook[otlp] extra).",
            Importance.MEDIUM,
            OneOf(TELEMETRY_EXPORTERS),
        ),
        ConfigKey(
            "telemetry.otlp.endpoint",
            ConfigType.STRING,
            "http://127.0.0.1:4317",
            "The OTLP/gRPC collector endpoint used by the otlp exporters.",
            Importance.LOW,
            Url(("http", "https")),
        ),
        ConfigKey(
            "telemetry.metrics.export.interval.ms",
            ConfigType.INT,
            60000,
            "How often metrics are exported when a metrics exporter is configured.",
            Importance.LOW,
            Range(100),
        ),
        ConfigKey(
            "shutdown.timeout.ms",
            ConfigType.INT,
            3000,
            "Upper bound on graceful shutdown after SIGTERM/SIGINT. In-flight RPCs get this "
            "long minus a reserve of min(1000 ms, a third of it); the reserve is for the "
            "service's own stop, cancelling its background tasks and flushing telemetry. The "
            "default keeps the whole exit well within 5 s.",
            Importance.MEDIUM,
            Range(0, 600000),
        ),
        ConfigKey(
            "socket.request.max.bytes",
            ConfigType.INT,
            104857600,
            "The largest request (gRPC message) this process accepts, and the largest "
            "response it sends; larger ones fail with RESOURCE_EXHAUSTED.",
            Importance.HIGH,
            Range(1),
        ),
        ConfigKey(
            "queued.max.requests",
            ConfigType.INT,
            500,
            "The most RPCs this process handles at once (streams included); more are rejected "
            "with RESOURCE_EXHAUSTED instead of queueing without bound.",
            Importance.HIGH,
            Range(1),
        ),
    )
    return (*keys, *AUTHORIZATION_KEYS), (_check_otlp_available,)


def service_data_dir_default(prefix: str) -> DerivedDefault:
    """./.brook/<prefix>-<node.id>: the embedded default's per-node data directory."""

    def compute(values: Mapping[str, ConfigValue]) -> str:
        return str(Path(".brook") / f"{prefix}-{values['node.id']}")

    return DerivedDefault(f"./.brook/{prefix}-<node.id>", compute)


def service_config_def(
    *,
    listener_names: tuple[str, ...],
    default_listeners: str,
    keys: Iterable[ConfigKey],
    checks: Iterable[ConfigCheck] = (),
    optional_listener_names: tuple[str, ...] = (),
) -> ConfigDef:
    """A service's definition: the common keys, then its own."""
    common, common_checks = common_keys(
        listener_names=listener_names,
        default_listeners=default_listeners,
        optional_listener_names=optional_listener_names,
    )
    return ConfigDef((*common, *keys), (*common_checks, *checks))


def check_not_greater(lower: str, upper: str, why: str = "") -> ConfigCheck:
    """A rule: setting `lower` must not exceed setting `upper` (both int/long)."""

    def check(config: Config) -> str | None:
        low, high = config.get_int(lower), config.get_int(upper)
        if low <= high:
            return None
        return f"{lower}={low} must not exceed {upper}={high}" + (f"; {why}" if why else "")

    return check


# Keys several services share.

CONTROLLER_QUORUM_BOOTSTRAP_SERVERS: Final = ConfigKey(
    "controller.quorum.bootstrap.servers",
    ConfigType.LIST,
    ("127.0.0.1:9201",),
    "host:port of one or more controllers' GRPC listeners, comma-separated. Any one reachable "
    "controller is enough: it tells the caller which controller leads.",
    Importance.HIGH,
    HostPortList(),
)

REQUEST_TIMEOUT_MS: Final = ConfigKey(
    "request.timeout.ms",
    ConfigType.INT,
    30000,
    "The deadline this process sets on the RPCs it sends to other Brook processes.",
    Importance.HIGH,
    Range(1),
)

UNCLEAN_LEADER_ELECTION_ENABLE: Final = ConfigKey(
    "unclean.leader.election.enable",
    ConfigType.BOOLEAN,
    False,
    "Whether a replica outside the ISR may become leader when no ISR member is alive. That "
    "restores availability at the price of losing committed records, so it is off.",
    Importance.HIGH,
)


# Authorization (brook/security/authorizer.py): Kafka's names, on every service.

AUTHORIZER_CLASS_NAME: Final = "authorizer.class.name"
SUPER_USERS: Final = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND: Final = "allow.everyone.if.no.acl.found"
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def parse_super_users(text: str) -> tuple[Principal, ...]:
    """The principals of a super.users value (``User:a;User:b``); raises ValueError naming a
    malformed one."""
    return tuple(Principal.parse(part.strip()) for part in text.split(";") if part.strip())


@dataclass(frozen=True)
class _AuthorizerName:
    def __call__(self, value: ConfigValue) -> str | None:
        if value in ("", STANDARD_AUTHORIZER, "brook"):
            return None
        return f"is not an authorizer this process has (empty, {STANDARD_AUTHORIZER} or brook)"

    def describe(self) -> str:
        return f"empty, {STANDARD_AUTHORIZER} or brook"


@dataclass(frozen=True)
class _Principals:
    def __call__(self, value: ConfigValue) -> str | None:
        try:
            parse_super_users(str(value))
        except ValueError as e:
            return f"is not a semicolon-separated list of principals: {e}"
        return None

    def describe(self) -> str:
        return "principals separated by ';' (User:alice;User:bob)"


AUTHORIZATION_KEYS: Final = (
    ConfigKey(
        AUTHORIZER_CLASS_NAME,
        ConfigType.STRING,
        "",
        "The authorizer of every request (Kafka API and gRPC call) against the ACLs in the "
        "cluster metadata: empty for none (everything is allowed, as in Kafka), "
        f"{STANDARD_AUTHORIZER} or its short name brook for Kafka's StandardAuthorizer "
        "semantics (docs/decisions.md, Security: authorization).",
        Importance.HIGH,
        _AuthorizerName(),
    ),
    ConfigKey(
        SUPER_USERS,
        ConfigType.STRING,
        "",
        "Principals allowed everything whatever the ACLs, separated by semicolons "
        "(User:brook;User:admin). The cluster's own processes authenticate as User:brook by "
        "default, so it belongs here when authorization is on.",
        Importance.HIGH,
        _Principals(),
    ),
    ConfigKey(
        ALLOW_EVERYONE_IF_NO_ACL_FOUND,
        ConfigType.BOOLEAN,
        False,
        "Whether a resource that no ACL names (for anyone) is open to every principal; false "
        "keeps such resources closed to all but super users.",
        Importance.MEDIUM,
    ),
)
