"""Generate the gateway's Kafka message specs from Apache Kafka's JSON message schemas.

Reads ../shared/kafka-protocol/messages/*.json (beside the clone; `--messages` to point
elsewhere) at development time and writes gateway/brook_gateway/protocol/kafka_messages.py:
one `MessageSpec` per request and response the gateway speaks, as Python data that
gateway/brook_gateway/protocol/codec.py compiles into encoders and decoders. Only the shape of
the messages is kept (names, types, versions, tags, defaults); the schemas' prose is not.

Run it after adding an API to `APIS`; `--check` regenerates in memory and fails if the result
differs from what is committed (tests/unit/gateway/test_kafka_codegen.py runs it).
The output is laid out the way `ruff format` lays it out, so the committed file is both
generated and formatted, and regenerating it is byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_MESSAGES_DIR: Final = ROOT.parent / "shared" / "kafka-protocol" / "messages"
OUTPUT: Final = ROOT / "gateway" / "brook_gateway" / "protocol" / "kafka_messages.py"
LINE_LENGTH_MAX: Final = 100
INDENT: Final = "    "
HI: Final = 0x7FFF

# The APIs the gateway speaks (issue #9), by the schema files' message names without the
# Request/Response suffix, in API-key order.
APIS: Final = (
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "DescribeGroups",
    "ListGroups",
    "SaslHandshake",
    "ApiVersions",
    "CreateTopics",
    "DeleteTopics",
    "DeleteRecords",
    "InitProducerId",
    "OffsetForLeaderEpoch",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "WriteTxnMarkers",
    "TxnOffsetCommit",
    "DescribeAcls",
    "CreateAcls",
    "DeleteAcls",
    "DescribeConfigs",
    "AlterConfigs",
    "SaslAuthenticate",
    "CreatePartitions",
    "DeleteGroups",
    "IncrementalAlterConfigs",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    "DescribeProducers",
    "DescribeTransactions",
    "ListTransactions",
)

_TYPE_DEFAULTS: Final[dict[str, Any]] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "string": "",
}


class SchemaError(Exception):
    """A schema file this generator cannot read."""


def strip_comments(text: str) -> str:
    """Drops // comments (the schemas are JSON with comments), leaving // inside strings."""
    out: list[str] = []
    for line in text.splitlines():
        in_string = False
        escaped = False
        cut = len(line)
        for i, ch in enumerate(line):
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def load_schema(path: Path) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as e:
        raise SchemaError(f"{path}: {e}") from None
    return schema


def version_range(text: str | None) -> tuple[int, int] | None:
    """Kafka's "N+", "A-B", "N", "none" as an inclusive (low, high); None for "none"."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), HI
    if "-" in text:
        low, high = text.split("-")
        return int(low), int(high)
    return int(text), int(text)


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def upper_snake(name: str) -> str:
    return snake_case(name).upper()


@dataclass(frozen=True)
class Call:
    """A call expression to print: `func(arg, ..., key=value, ...)`."""

    func: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Tuple:
    items: tuple[Any, ...]


def quote(text: str) -> str:
    """A string literal in the quotes `ruff format` prefers."""
    return json.dumps(text)


def render_range(versions: tuple[int, int]) -> str:
    high = "HI" if versions[1] == HI else str(versions[1])
    return f"({versions[0]}, {high})"


def flat(node: Any) -> str:
    if isinstance(node, Call):
        return f"{node.func}({', '.join(flat(a) for a in node.args)})"
    if isinstance(node, Tuple):
        if len(node.items) == 1:
            return f"({flat(node.items[0])},)"
        return f"({', '.join(flat(i) for i in node.items)})"
    if isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], str):
        return f"{node[0]}={flat(node[1])}"
    if isinstance(node, str):
        return node
    raise TypeError(node)


def layout(node: Any, indent: int, prefix: str, suffix: str) -> list[str]:
    """Lines for `prefix + node + suffix` at `indent`: on one line if it fits, else one
    argument per line with a trailing comma (which `ruff format` keeps exploded)."""
    pad = INDENT * indent
    one_line = f"{pad}{prefix}{flat(node)}{suffix}"
    if len(one_line) <= LINE_LENGTH_MAX or not isinstance(node, Call | Tuple | tuple):
        return [one_line]
    if isinstance(node, tuple):
        return layout(node[1], indent, f"{prefix}{node[0]}=", suffix)
    opener = f"{node.func}(" if isinstance(node, Call) else "("
    children = node.args if isinstance(node, Call) else node.items
    lines = [f"{pad}{prefix}{opener}"]
    for child in children:
        lines.extend(layout(child, indent + 1, "", ","))
    lines.append(f"{pad}){suffix}")
    return lines


class Generator:
    def __init__(self, common_structs: dict[str, list[dict[str, Any]]], source: str) -> None:
        self.common_structs = common_structs
        self.source = source

    def field(self, spec: dict[str, Any]) -> Call:
        name = spec["name"]
        kind: str = spec["type"]
        array = kind.startswith("[]")
        element = kind[2:] if array else kind
        versions = version_range(spec.get("versions"))
        if versions is None:
            raise SchemaError(f"{self.source}: field {name} has no versions")
        args: list[Any] = [quote(snake_case(name)), None, render_range(versions)]
        keywords: list[tuple[str, Any]] = []
        nested: list[dict[str, Any]] | None = spec.get("fields")
        if element in _TYPE_DEFAULTS or element in ("uuid", "bytes", "records"):
            args[1] = quote(element)
            if nested:
                raise SchemaError(f"{self.source}: scalar field {name} has fields")
        else:
            args[1] = quote("struct")
            if nested is None:
                nested = self.common_structs.get(element)
                if nested is None:
                    raise SchemaError(f"{self.source}: field {name}: unknown type {element}")
        if array:
            keywords.append(("array", "True"))
        nullable = version_range(spec.get("nullableVersions"))
        if nullable is not None:
            keywords.append(("nullable", render_range(nullable)))
        if "tag" in spec:
            tagged = version_range(spec.get("taggedVersions"))
            if tagged is None:
                raise SchemaError(f"{self.source}: tagged field {name} without taggedVersions")
            keywords.append(("tag", str(int(spec["tag"]))))
            keywords.append(("tagged", render_range(tagged)))
        if "flexibleVersions" in spec:
            override = version_range(spec["flexibleVersions"])
            keywords.append(("flexible", "NEVER" if override is None else render_range(override)))
        default = spec.get("default")
        if default == "null":
            keywords.append(("null_default", "True"))
        elif default is not None and not array and element in _TYPE_DEFAULTS:
            value = self.scalar_default(element, default, name)
            if value != _TYPE_DEFAULTS[element]:
                literal = quote(value) if isinstance(value, str) else repr(value)
                keywords.append(("default", literal))
        if nested:
            keywords.append(("fields", Tuple(tuple(self.field(f) for f in nested))))
        return Call("F", (*args, *keywords))

    def scalar_default(self, kind: str, text: Any, name: str) -> Any:
        if kind == "bool":
            # JSON's own booleans (`"default": false`) as well as the usual strings.
            if isinstance(text, bool):
                return text
            if str(text) not in ("true", "false"):
                raise SchemaError(f"{self.source}: field {name}: bool default {text!r}")
            return str(text) == "true"
        if kind == "string":
            return str(text)
        if kind == "float64":
            return float(text)
        return int(str(text), 0)

    def message(self, schema: dict[str, Any], constant: str) -> list[str]:
        valid = version_range(schema["validVersions"])
        if valid is None:
            raise SchemaError(f"{self.source}: no valid versions")
        flexible = version_range(schema.get("flexibleVersions"))
        api_key = schema.get("apiKey")
        call = Call(
            "MessageSpec",
            (
                quote(schema["name"]),
                repr(api_key) if api_key is not None else "None",
                render_range(valid),
                "NEVER" if flexible is None else render_range(flexible),
                Tuple(tuple(self.field(f) for f in schema["fields"])),
            ),
        )
        return layout(call, 0, f"{constant}: Final = ", "")


HEADER_TEMPLATE: Final = '''\
"""Kafka's request and response schemas as Brook message specs. GENERATED: do not edit.

Written by tools/gen_kafka_protocol.py from the message schemas of Apache Kafka (Apache
License 2.0; ../shared/kafka-protocol/README.md names the commit). Regenerate with
`python tools/gen_kafka_protocol.py`.
"""

from __future__ import annotations

import enum
from typing import Final

from brook_gateway.protocol.schema import HI, NEVER, MessageSpec
from brook_gateway.protocol.schema import FieldSpec as F

__all__ = ["REQUESTS", "REQUEST_HEADER", "RESPONSES", "RESPONSE_HEADER", "ApiKey"]
'''


def schemas(messages_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in ("RequestHeader", "ResponseHeader"):
        yield name, load_schema(messages_dir / f"{name}.json")
    for api in APIS:
        for kind in ("Request", "Response"):
            yield api + kind, load_schema(messages_dir / f"{api}{kind}.json")


def render(messages_dir: Path) -> str:
    if not messages_dir.is_dir():
        raise SchemaError(
            f"{messages_dir} is missing: the Kafka message schemas are expected in "
            "../shared/kafka-protocol/messages beside the clone"
        )
    lines = [HEADER_TEMPLATE, "", "class ApiKey(enum.IntEnum):"]
    loaded = list(schemas(messages_dir))
    keys = {s["apiKey"]: name[: -len("Request")] for name, s in loaded if s["type"] == "request"}
    for key in sorted(keys):
        lines.append(f"{INDENT}{upper_snake(keys[key])} = {key}")
    for name, schema in loaded:
        if schema["name"] != name:
            raise SchemaError(f"{name}.json describes {schema['name']}")
        common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
        generator = Generator(common, f"{name}.json")
        lines.extend(("", ""))
        lines.extend(generator.message(schema, upper_snake(name)))
    for table, kind in (("REQUESTS", "Request"), ("RESPONSES", "Response")):
        lines.extend(("", ""))
        lines.append(f"{table}: Final[dict[int, MessageSpec]] = {{")
        for key in sorted(keys):
            constant = upper_snake(keys[key])
            lines.append(f"{INDENT}ApiKey.{constant}: {upper_snake(keys[key] + kind)},")
        lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed file is stale")
    parser.add_argument("--messages", type=Path, default=DEFAULT_MESSAGES_DIR)
    args = parser.parse_args()
    try:
        text = render(args.messages)
    except SchemaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        committed = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if committed != text:
            print(
                f"{OUTPUT.relative_to(ROOT)} is stale: run `python tools/gen_kafka_protocol.py`",
                file=sys.stderr,
            )
            return 1
        print("kafka message specs match the schemas")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
