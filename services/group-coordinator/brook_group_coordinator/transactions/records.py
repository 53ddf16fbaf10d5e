"""The records the transaction coordinator writes to __transaction_state, and their encoding.

Brook's own, in the manner of the group coordinator's (``brook_group_coordinator.records``):
one record per transactional id, keyed by it, so compaction keeps exactly its latest state; a
tombstone (no value) removes an expired id.

Key:   u16 kind 10 (a transaction), then the transactional id as u16 length + UTF-8 bytes.
       Kind 3 is the fence a coordinator appends when it takes a partition over (the same
       record as in __consumer_offsets, ``fencing.py``); loading skips it, and skips a kind it
       does not know with a warning (a newer coordinator's records never keep an older one
       from serving the partition).
Value: UTF-8 JSON object with "v": 1 (a later version may add fields and still read old ones):
       producer_id, producer_epoch, last_producer_id, last_producer_epoch, timeout_ms, state
       (Kafka's state name), partitions ([topic, partition] pairs, sorted), groups (sorted),
       start_ms, update_ms; "two_phase": true only for a two-phase (KIP-939) transactional id
       (absent, as in values written before it existed: false).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

from brook_group_coordinator.records import RecordFormatError, UnknownRecordKindError
from brook_group_coordinator.transactions.state import Transaction, TxnState

__all__ = [
    "KIND_TRANSACTION",
    "decode_transaction",
    "decode_transaction_key",
    "encode_transaction",
    "encode_transaction_key",
]

KIND_TRANSACTION: Final = 10
VALUE_VERSION: Final = 1
_U16 = struct.Struct(">H")
_STATES: Final = {state.value: state for state in TxnState}


def encode_transaction_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"a transactional id is at most 65535 bytes, not {len(raw)}")
    return _U16.pack(KIND_TRANSACTION) + _U16.pack(len(raw)) + raw


def decode_transaction_key(key: bytes) -> str:
    """The transactional id; UnknownRecordKindError for another kind (the fence among them),
    RecordFormatError for a key that does not parse."""
    if len(key) < 2:
        raise RecordFormatError(f"a key of {len(key)} bytes has no kind")
    (kind,) = _U16.unpack_from(key)
    if kind != KIND_TRANSACTION:
        raise UnknownRecordKindError(kind)
    if len(key) < 4:
        raise RecordFormatError("a transaction key without its id length")
    (length,) = _U16.unpack_from(key, 2)
    if len(key) != 4 + length:
        raise RecordFormatError(f"a transaction key of {len(key)} bytes names {length} bytes")
    try:
        return key[4:].decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordFormatError(f"a transactional id that is not UTF-8: {error}") from None


def encode_transaction(transaction: Transaction) -> bytes:
    value = {
        "v": VALUE_VERSION,
        "producer_id": transaction.producer_id,
        "producer_epoch": transaction.producer_epoch,
        "last_producer_id": transaction.last_producer_id,
        "last_producer_epoch": transaction.last_producer_epoch,
        "timeout_ms": transaction.timeout_ms,
        "state": transaction.state.value,
        "partitions": sorted([topic, partition] for topic, partition in transaction.partitions),
        "groups": sorted(transaction.groups),
        "start_ms": transaction.start_ms,
        "update_ms": transaction.update_ms,
    }
    if transaction.two_phase:
        value["two_phase"] = True
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def decode_transaction(transactional_id: str, raw: bytes) -> Transaction:
    try:
        value = json.loads(raw)
        if not isinstance(value, dict) or not isinstance(value.get("v"), int):
            raise RecordFormatError("a transaction value is not a versioned JSON object")
        state = _STATES.get(value["state"])
        if state is None:
            raise RecordFormatError(f"unknown transaction state {value['state']!r}")
        return Transaction(
            transactional_id=transactional_id,
            producer_id=_int(value, "producer_id"),
            producer_epoch=_int(value, "producer_epoch"),
            last_producer_id=_int(value, "last_producer_id"),
            last_producer_epoch=_int(value, "last_producer_epoch"),
            timeout_ms=_int(value, "timeout_ms"),
            state=state,
            partitions=frozenset((str(t), int(p)) for t, p in value["partitions"]),
            groups=frozenset(str(g) for g in value["groups"]),
            start_ms=_int(value, "start_ms"),
            update_ms=_int(value, "update_ms"),
            two_phase=_bool(value, "two_phase"),
        )
    except RecordFormatError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise RecordFormatError(f"transaction {transactional_id!r}: {error}") from None


def _int(value: dict[str, Any], field: str) -> int:
    found = value[field]
    if not isinstance(found, int) or isinstance(found, bool):
        raise RecordFormatError(f"{field} is {found!r}, not an integer")
    return found


def _bool(value: dict[str, Any], field: str) -> bool:
    """An optional boolean field, false when absent."""
    found = value.get(field, False)
    if not isinstance(found, bool):
        raise RecordFormatError(f"{field} is {found!r}, not a boolean")
    return found
