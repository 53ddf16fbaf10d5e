"""Encoders and decoders derived from the declarative message specs.

A spec is compiled once per (message, version) into per-field read and write functions, so
the hot path does no version arithmetic. Messages are plain dicts keyed by snake_case field
names; a field absent from a version decodes to its default and is not written, and a field
missing from a dict being encoded is written as its default. A `records` field is taken and
returned as bytes: record batches pass through, never parsed here.

Unknown tagged fields (a newer peer's additions) are kept under `UNKNOWN_TAGS` as
(tag, raw bytes) pairs, so a decoded message re-encodes to the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from brook_gateway.protocol.primitives import UUID_ZERO, ProtocolError, Reader, Writer
from brook_gateway.protocol.schema import FieldSpec, MessageSpec, VersionRange, in_range

__all__ = ["UNKNOWN_TAGS", "Message", "MessageCodec", "codec_for", "default_value"]

Message = dict[str, Any]
UNKNOWN_TAGS: Final = "_unknown_tagged_fields"

ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]

_SCALAR_DEFAULTS: Final[dict[str, Any]] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "uuid": UUID_ZERO,
    "string": "",
    "bytes": b"",
    "records": b"",
}


def default_value(field: FieldSpec) -> Any:
    """A fresh value a reader assumes when `field` is absent."""
    if field.null_default:
        return None
    if field.array:
        return []
    if field.type == "struct":
        return {f.name: default_value(f) for f in field.fields}
    if field.default is not None:
        return field.default
    return _SCALAR_DEFAULTS[field.type]


def _scalar_reader(kind: str, flexible: bool, nullable: bool) -> ReadFn:
    if kind == "string":
        return lambda r: r.string(flexible, nullable)
    if kind in ("bytes", "records"):
        return lambda r: r.blob(flexible, nullable)
    if kind == "uuid":
        return lambda r: r.raw(16)
    reader: ReadFn = Reader.boolean if kind == "bool" else getattr(Reader, kind)
    return reader


def _scalar_writer(kind: str, flexible: bool, nullable: bool) -> WriteFn:
    if kind == "string":
        return lambda w, v: w.string(v, flexible, nullable)
    if kind in ("bytes", "records"):
        return lambda w, v: w.blob(v, flexible, nullable)
    if kind == "uuid":
        return Writer.uuid
    if kind == "bool":
        return Writer.boolean
    writer: WriteFn = getattr(Writer, kind)
    if kind == "float64":
        return writer

    def write_int(w: Writer, v: Any) -> None:
        # bool is an int to Python; on the wire it would silently become 0/1.
        if not isinstance(v, int) or isinstance(v, bool):
            raise ProtocolError(f"{kind} value {v!r} is not an int")
        writer(w, v)

    return write_int


class _StructCodec:
    """One struct (or message body) at one version."""

    __slots__ = ("absent", "flexible", "inline", "tagged", "tagged_by_tag")

    def __init__(self, fields: tuple[FieldSpec, ...], version: int, flexible: VersionRange):
        self.flexible = in_range(version, flexible)
        self.inline: list[tuple[str, ReadFn, WriteFn, FieldSpec]] = []
        self.tagged: list[tuple[int, str, ReadFn, WriteFn, FieldSpec]] = []
        self.absent: list[FieldSpec] = []
        for field in fields:
            if field.tag is not None and in_range(version, field.tagged):
                read, write = _field_codec(field, version, flexible)
                self.tagged.append((field.tag, field.name, read, write, field))
            elif in_range(version, field.versions):
                read, write = _field_codec(field, version, flexible)
                self.inline.append((field.name, read, write, field))
            else:
                self.absent.append(field)
        self.tagged.sort(key=lambda t: t[0])
        self.tagged_by_tag = {t[0]: t for t in self.tagged}

    def read(self, r: Reader) -> Message:
        message: Message = {name: read(r) for name, read, _, _ in self.inline}
        for field in self.absent:
            message[field.name] = default_value(field)
        if self.flexible:
            self._read_tags(r, message)
        return message

    def _read_tags(self, r: Reader, message: Message) -> None:
        count = r.uvarint()
        if count > r.remaining:
            raise ProtocolError(f"{count} tagged fields in {r.remaining} bytes")
        unknown: list[tuple[int, bytes]] = []
        last_tag = -1
        for _ in range(count):
            tag = r.uvarint()
            if tag <= last_tag:
                raise ProtocolError(f"tagged field {tag} out of order after {last_tag}")
            last_tag = tag
            size = r.uvarint()
            if size > r.remaining:
                raise ProtocolError(f"tagged field {tag} of {size} bytes in {r.remaining}")
            known = self.tagged_by_tag.get(tag)
            if known is None:
                unknown.append((tag, r.raw(size)))
                continue
            sub = Reader(r.data, r.pos, r.pos + size)
            message[known[1]] = known[2](sub)
            if sub.pos != sub.end:
                raise ProtocolError(f"tagged field {tag}: {sub.end - sub.pos} bytes left over")
            r.pos += size
        for _, name, _, _, field in self.tagged:
            if name not in message:
                message[name] = default_value(field)
        if unknown:
            message[UNKNOWN_TAGS] = unknown

    def write(self, w: Writer, message: Message) -> None:
        if not isinstance(message, dict):
            raise ProtocolError(f"struct value of type {type(message).__name__}, not a dict")
        for name, _, write, field in self.inline:
            value = message[name] if name in message else default_value(field)
            try:
                write(w, value)
            except ProtocolError as e:
                raise ProtocolError(f"{name}: {e}") from None
        if self.flexible:
            self._write_tags(w, message)

    def _write_tags(self, w: Writer, message: Message) -> None:
        entries: list[tuple[int, bytes]] = []
        for tag, name, _, write, field in self.tagged:
            if name not in message:
                continue
            value = message[name]
            if value == default_value(field):
                continue
            sub = Writer()
            write(sub, value)
            entries.append((tag, bytes(sub.out)))
        unknown = message.get(UNKNOWN_TAGS)
        if unknown:
            entries.extend((int(tag), bytes(data)) for tag, data in unknown)
            entries.sort(key=lambda e: e[0])
            tags = [e[0] for e in entries]
            if len(set(tags)) != len(tags):
                raise ProtocolError(f"duplicate tagged fields {tags}")
        w.uvarint(len(entries))
        for tag, data in entries:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)


def _field_codec(field: FieldSpec, version: int, flexible: VersionRange) -> tuple[ReadFn, WriteFn]:
    compact = in_range(version, field.flexible if field.flexible is not None else flexible)
    nullable = in_range(version, field.nullable)
    element_read: ReadFn
    element_write: WriteFn
    if field.type == "struct":
        struct_codec = _StructCodec(field.fields, version, flexible)
        element_read, element_write = struct_codec.read, struct_codec.write
        if nullable and not field.array:
            return _nullable_struct(struct_codec)
    else:
        # Inside an array, nullability belongs to the array, not to its elements.
        element_nullable = nullable and not field.array
        element_read = _scalar_reader(field.type, compact, element_nullable)
        element_write = _scalar_writer(field.type, compact, element_nullable)
    if not field.array:
        return element_read, element_write
    return _array_codec(element_read, element_write, compact, nullable)


def _nullable_struct(struct_codec: _StructCodec) -> tuple[ReadFn, WriteFn]:
    def read(r: Reader) -> Message | None:
        return None if r.int8() < 0 else struct_codec.read(r)

    def write(w: Writer, value: Message | None) -> None:
        if value is None:
            w.int8(-1)
        else:
            w.int8(1)
            struct_codec.write(w, value)

    return read, write


def _array_codec(
    element_read: ReadFn, element_write: WriteFn, compact: bool, nullable: bool
) -> tuple[ReadFn, WriteFn]:
    def read(r: Reader) -> list[Any] | None:
        count = r.array_count(compact, nullable)
        if count < 0:
            return None
        return [element_read(r) for _ in range(count)]

    def write(w: Writer, value: list[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise ProtocolError("null for a non-nullable array")
            w.length(-1, compact, wide=True)
            return
        if not isinstance(value, list | tuple):
            raise ProtocolError(f"array value of type {type(value).__name__}")
        w.length(len(value), compact, wide=True)
        for element in value:
            element_write(w, element)

    return read, write


class MessageCodec:
    """Encodes and decodes one message (request, response or header) at one version."""

    __slots__ = ("_body", "spec", "version")

    def __init__(self, spec: MessageSpec, version: int) -> None:
        if not in_range(version, spec.valid):
            raise ValueError(f"{spec.name} has no version {version} (valid {spec.valid})")
        self.spec = spec
        self.version = version
        self._body = _StructCodec(spec.fields, version, spec.flexible)

    @property
    def flexible(self) -> bool:
        return self._body.flexible

    def read(self, r: Reader) -> Message:
        """Decodes from `r`, leaving it just past the message."""
        return self._body.read(r)

    def decode(self, data: bytes) -> Message:
        """Decodes exactly `data`; bytes left over are an error."""
        r = Reader(data)
        message = self._body.read(r)
        if r.remaining:
            raise ProtocolError(f"{self.spec.name} v{self.version}: {r.remaining} bytes left over")
        return message

    def write(self, w: Writer, message: Message) -> None:
        self._body.write(w, message)

    def encode(self, message: Message) -> bytes:
        w = Writer()
        self._body.write(w, message)
        return bytes(w.out)

    def default(self) -> Message:
        """A message with every field of this version at its default."""
        return {field.name: default_value(field) for field in self.spec.fields}


# Keyed by the spec's identity: a MessageSpec is a frozen dataclass whose generated hash walks
# every nested field spec, several times per request on the hot path. A cached codec holds its
# spec, so an id here cannot be reused by another spec.
_CODECS: Final[dict[tuple[int, int], MessageCodec]] = {}


def codec_for(spec: MessageSpec, version: int) -> MessageCodec:
    """The compiled codec of `spec` at `version` (compiled once, then shared)."""
    key = (id(spec), version)
    codec = _CODECS.get(key)
    if codec is None:
        codec = _CODECS[key] = MessageCodec(spec, version)
    return codec
