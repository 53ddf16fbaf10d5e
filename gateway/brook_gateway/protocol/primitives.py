"""Kafka's wire primitives: big-endian fixed-width integers, unsigned varints, uuids, and the
classic (int16/int32 length) and compact (unsigned varint length + 1) strings, bytes and array
headers.

Every read checks bounds and raises `ProtocolError` with the offset, so a malformed or
truncated frame becomes a clear reason to close a connection, never an IndexError.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["UUID_ZERO", "ProtocolError", "Reader", "Writer"]

UUID_ZERO: Final = bytes(16)
# An unsigned varint that encodes a 32-bit value takes at most 5 bytes; more is malformed.
UVARINT_BYTES_MAX: Final = 5

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")
_F64: Final = struct.Struct(">d")


class ProtocolError(ValueError):
    """Bytes that do not follow the protocol, or a value that cannot be encoded."""


class Reader:
    """Reads primitives from `data` starting at `pos`, advancing `pos`."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > self.end:
            raise ProtocolError(
                f"truncated: need {size} bytes at offset {start}, have {self.end - start}"
            )
        self.pos = start + size
        return start

    def int8(self) -> int:
        return int(_I8.unpack_from(self.data, self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack_from(self.data, self._take(2))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self.data, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.data, self._take(4))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self.data, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.data, self._take(8))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self.data, self._take(8))[0])

    def boolean(self) -> bool:
        return self.data[self._take(1)] != 0

    def raw(self, size: int) -> bytes:
        start = self._take(size)
        return bytes(self.data[start : start + size])

    def uvarint(self) -> int:
        """An unsigned base-128 varint of at most 32 bits (lengths, counts, tags)."""
        value = 0
        for i in range(UVARINT_BYTES_MAX):
            byte = self.data[self._take(1)]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    raise ProtocolError(f"unsigned varint too large at offset {self.pos}")
                return value
        raise ProtocolError(f"unsigned varint longer than {UVARINT_BYTES_MAX} bytes")

    def length(self, compact: bool, nullable: bool, what: str, wide: bool) -> int:
        """A string/bytes/array length: -1 means null (only where nullable). `wide` selects the
        classic int32 length (bytes, arrays) over int16 (strings)."""
        if compact:
            size = self.uvarint() - 1
        else:
            size = self.int32() if wide else self.int16()
        if size < -1 or (size == -1 and not nullable):
            raise ProtocolError(f"invalid {what} length {size} at offset {self.pos}")
        return size

    def string(self, compact: bool, nullable: bool) -> str | None:
        size = self.length(compact, nullable, "string", wide=False)
        if size == -1:
            return None
        start = self._take(size)
        try:
            return bytes(self.data[start : start + size]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"string at offset {start} is not UTF-8: {e.reason}") from None

    def blob(self, compact: bool, nullable: bool) -> bytes | None:
        size = self.length(compact, nullable, "bytes", wide=True)
        if size == -1:
            return None
        return self.raw(size)

    def array_count(self, compact: bool, nullable: bool) -> int:
        count = self.length(compact, nullable, "array", wide=True)
        # Every element takes at least one byte except in degenerate schemas, so a count larger
        # than what is left is a lie: refuse it before allocating anything for it.
        if count > self.remaining:
            raise ProtocolError(f"array of {count} elements in {self.remaining} bytes")
        return count


class Writer:
    """Appends primitives to a bytearray."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def _pack(self, packer: struct.Struct, value: object, what: str) -> None:
        try:
            self.out += packer.pack(value)
        except struct.error as e:
            raise ProtocolError(f"{what} value {value!r}: {e}") from None

    def int8(self, value: int) -> None:
        self._pack(_I8, value, "int8")

    def int16(self, value: int) -> None:
        self._pack(_I16, value, "int16")

    def uint16(self, value: int) -> None:
        self._pack(_U16, value, "uint16")

    def int32(self, value: int) -> None:
        self._pack(_I32, value, "int32")

    def uint32(self, value: int) -> None:
        self._pack(_U32, value, "uint32")

    def int64(self, value: int) -> None:
        self._pack(_I64, value, "int64")

    def float64(self, value: float) -> None:
        self._pack(_F64, value, "float64")

    def boolean(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ProtocolError(f"bool value {value!r} is not a bool")
        self.out.append(1 if value else 0)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def uvarint(self, value: int) -> None:
        if not 0 <= value <= 0xFFFFFFFF:
            raise ProtocolError(f"unsigned varint value {value} out of range")
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def length(self, size: int, compact: bool, wide: bool) -> None:
        """`size` -1 writes null."""
        if compact:
            self.uvarint(size + 1)
        elif wide:
            self.int32(size)
        else:
            self.int16(size)

    def string(self, value: str | None, compact: bool, nullable: bool) -> None:
        if value is None:
            if not nullable:
                raise ProtocolError("null for a non-nullable string")
            self.length(-1, compact, wide=False)
            return
        if not isinstance(value, str):
            raise ProtocolError(f"string value {value!r} is not a str")
        data = value.encode("utf-8")
        if not compact and len(data) > 0x7FFF:
            raise ProtocolError(f"string of {len(data)} bytes exceeds the int16 length")
        self.length(len(data), compact, wide=False)
        self.out += data

    def blob(
        self, value: bytes | bytearray | memoryview | None, compact: bool, nullable: bool
    ) -> None:
        if value is None:
            if not nullable:
                raise ProtocolError("null for non-nullable bytes")
            self.length(-1, compact, wide=True)
            return
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ProtocolError(f"bytes value of type {type(value).__name__}")
        self.length(len(value), compact, wide=True)
        self.out += value

    def uuid(self, value: bytes) -> None:
        if not isinstance(value, bytes) or len(value) != 16:
            raise ProtocolError(f"uuid value {value!r} is not 16 bytes")
        self.out += value
