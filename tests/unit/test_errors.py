"""Kafka's error codes: the numbers clients depend on, and which failures they may retry."""

from __future__ import annotations

import pytest

from brook.errors import BrookError, ErrorCode, error_code, is_retriable

# Codes a Kafka client must see exactly as Kafka sends them (from the Kafka protocol guide).
KAFKA_CODES = {
    "UNKNOWN_SERVER_ERROR": -1,
    "NONE": 0,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7,
    "MESSAGE_TOO_LARGE": 10,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
    "RECORD_LIST_TOO_LARGE": 18,
    "NOT_ENOUGH_REPLICAS": 19,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "UNSUPPORTED_SASL_MECHANISM": 33,
    "ILLEGAL_SASL_STATE": 34,
    "UNSUPPORTED_VERSION": 35,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38,
    "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47,
    "SASL_AUTHENTICATION_FAILED": 58,
    "UNKNOWN_PRODUCER_ID": 59,
    "GROUP_ID_NOT_FOUND": 69,
    "FENCED_LEADER_EPOCH": 74,
    "UNKNOWN_LEADER_EPOCH": 75,
    "STALE_BROKER_EPOCH": 77,
    "MEMBER_ID_REQUIRED": 79,
    "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82,
    "INVALID_RECORD": 87,
    "UNKNOWN_TOPIC_ID": 100,
    "INCONSISTENT_TOPIC_ID": 103,
    "TRANSACTION_ABORTABLE": 120,
}


def test_error_codes_have_kafkas_numbers() -> None:
    for name, code in KAFKA_CODES.items():
        assert ErrorCode[name] == code, name
        assert error_code(code).name == name


def test_every_code_from_minus_one_to_128_is_defined_once() -> None:
    codes = [int(member) for member in ErrorCode]
    assert sorted(codes) == list(range(-1, 129))
    assert len({member.name for member in ErrorCode}) == len(codes)


@pytest.mark.parametrize(
    "name",
    [
        "CORRUPT_MESSAGE",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NOT_CONTROLLER",
        "KAFKA_STORAGE_ERROR",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "THROTTLING_QUOTA_EXCEEDED",
        "UNKNOWN_TOPIC_ID",
    ],
)
def test_transient_conditions_are_retriable(name: str) -> None:
    assert ErrorCode[name].retriable
    assert is_retriable(ErrorCode[name])


@pytest.mark.parametrize(
    "name",
    [
        "UNKNOWN_SERVER_ERROR",
        "NONE",
        "OFFSET_OUT_OF_RANGE",
        "MESSAGE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_REQUEST",
        "TOPIC_ALREADY_EXISTS",
        "REBALANCE_IN_PROGRESS",
        "UNKNOWN_MEMBER_ID",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "INVALID_RECORD",
        "UNSUPPORTED_VERSION",
    ],
)
def test_permanent_or_caller_errors_are_not_retriable(name: str) -> None:
    assert not ErrorCode[name].retriable


def test_unknown_codes_read_as_unknown_server_error_and_are_not_retriable() -> None:
    assert error_code(32767) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert error_code(-2) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert not is_retriable(32767)


def test_brook_error_carries_its_code_and_retriability() -> None:
    error = BrookError(ErrorCode.NOT_ENOUGH_REPLICAS, "ISR has 1 of 2 replicas")
    assert error.code is ErrorCode.NOT_ENOUGH_REPLICAS
    assert error.retriable
    assert error.message == "ISR has 1 of 2 replicas"
    assert str(error) == "NOT_ENOUGH_REPLICAS (19): ISR has 1 of 2 replicas"
    assert BrookError(ErrorCode.MESSAGE_TOO_LARGE).message == "message too large"


def test_brook_error_cannot_carry_none() -> None:
    with pytest.raises(ValueError, match="other than NONE"):
        BrookError(ErrorCode.NONE)
