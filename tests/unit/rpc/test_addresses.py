"""brook.rpc.addresses: the one way every process writes, picks and reads host:port."""

from __future__ import annotations

import re

import pytest

from brook.rpc.addresses import format_address, listener_address, parse_address
from brook.v1 import common_pb2


@pytest.mark.parametrize(
    ("host", "port", "address"),
    [
        ("127.0.0.1", 9092, "127.0.0.1:9092"),
        ("broker-1.example.com", 9092, "broker-1.example.com:9092"),
        ("localhost", 1, "localhost:1"),
        ("::1", 9092, "[::1]:9092"),
        ("fe80::1:2", 65535, "[fe80::1:2]:65535"),
    ],
)
def test_format_brackets_ipv6_only_and_parse_reads_it_back(
    host: str, port: int, address: str
) -> None:
    assert format_address(host, port) == address
    assert parse_address(address) == (host, port)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("localhost", "'localhost' has no port"),
        (":9092", "has no host"),
        ("::1:9092", "write IPv6 addresses in brackets, [::1]:9092"),
        ("[::1]9092", "is not [ipv6]:port"),
        ("[::1", "is not [ipv6]:port"),
        ("[example.com]:1", "'example.com' is not an IPv6 address"),
        ("bad host:1", "'bad host' is not a valid host name"),
        ("host:port", "port 'port' is not a number"),
        ("host:+1", "port '+1' is not a number"),
        ("host:", "port '' is not a number"),
        ("host:0", "port 0 is outside 1..65535"),
        ("[::1]:70000", "port 70000 is outside 1..65535"),
    ],
)
def test_parse_rejects_malformed_addresses_saying_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_address(text)


def _endpoint(listener: str, host: str, port: int) -> common_pb2.Endpoint:
    return common_pb2.Endpoint(listener=listener, host=host, port=port)


def test_listener_address_picks_the_named_listener_and_formats_it() -> None:
    endpoints = [_endpoint("PLAINTEXT", "::1", 9092), _endpoint("GRPC", "::1", 9101)]
    assert listener_address(endpoints) == "[::1]:9101"
    assert listener_address(endpoints, "PLAINTEXT") == "[::1]:9092"
    assert listener_address([_endpoint("GRPC", "10.0.0.1", 9101)]) == "10.0.0.1:9101"


def test_listener_address_is_none_without_that_listener_or_a_usable_host_and_port() -> None:
    # No fallback to another listener: it would speak Kafka, not gRPC.
    assert listener_address([_endpoint("PLAINTEXT", "h", 9092)]) is None
    assert listener_address([]) is None
    assert listener_address([_endpoint("GRPC", "", 9101)]) is None
    assert listener_address([_endpoint("GRPC", "h", 0)]) is None
    assert listener_address([_endpoint("GRPC", "h", 65536)]) is None
