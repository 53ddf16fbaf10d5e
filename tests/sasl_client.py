"""The client side of the gateway's SASL exchange, for tests that speak the Kafka protocol
themselves (a real client hides the error codes and frames they check): a SCRAM client
(RFC 5802), PLAIN's token, and a blocking connection, plaintext or TLS, that sends requests,
raw SASL tokens (after a v0 handshake) and tells when the gateway closed it.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import socket
import ssl
from dataclasses import dataclass, field
from typing import Final

from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import FRAME_SIZE_BYTES, decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey

from brook.security.scram import MECHANISMS, client_key, salted_password

READ_TIMEOUT_S: Final = 10.0


def plain_token(name: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{name}\0{password}".encode()


@dataclass
class ScramClient:
    mechanism: str
    name: str
    password: str
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    _first_bare: str = ""
    _server_signature: bytes = b""

    def first(self) -> bytes:
        escaped = self.name.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={escaped},r={self.nonce}"
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """client-final with the proof, from the server-first message."""
        mechanism = MECHANISMS[self.mechanism]
        attributes = dict(a.split("=", 1) for a in server_first.decode().split(","))
        salted = salted_password(
            mechanism, self.password, base64.b64decode(attributes["s"]), int(attributes["i"])
        )
        without_proof = f"c=biws,r={attributes['r']}"
        auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        key = client_key(mechanism, salted)
        signature = mechanism.hmac(mechanism.hash(key), auth_message)
        proof = bytes(a ^ b for a, b in zip(key, signature, strict=True))
        server_key = mechanism.hmac(salted, b"Server Key")
        self._server_signature = mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def server_verified(self, server_final: bytes) -> bool:
        """Whether the server proved it knows the credential (its signature matches)."""
        expected = b"v=" + base64.b64encode(self._server_signature)
        return hmac.compare_digest(server_final, expected)


class KafkaConnection:
    """One blocking connection to a Kafka listener."""

    def __init__(self, address: tuple[str, int], tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(address, timeout=READ_TIMEOUT_S)
        self.sock: socket.socket = (
            tls.wrap_socket(sock, server_hostname=address[0]) if tls is not None else sock
        )
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(len(payload).to_bytes(FRAME_SIZE_BYTES, "big") + payload)

    def read_frame(self) -> bytes | None:
        """The next frame's payload; None if the gateway closed the connection first."""
        size = self._read_exactly(FRAME_SIZE_BYTES)
        if size is None:
            return None
        return self._read_exactly(int.from_bytes(size, "big"))

    def _read_exactly(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            try:
                chunk = self.sock.recv(count - len(data))
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def request(self, api_key: ApiKey, version: int, body: Message) -> Message | None:
        """The response to one request; None if the gateway closed the connection instead."""
        self._correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self._correlation_id, "test", body))
        frame = self.read_frame()
        if frame is None:
            return None
        correlation_id, response = decode_response(api_key, version, frame)
        assert correlation_id == self._correlation_id
        return response

    def closed_by_peer(self) -> bool:
        """Whether the gateway has closed the connection (waits up to READ_TIMEOUT_S)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True


def authenticate(
    connection: KafkaConnection, mechanism: str, name: str, password: str
) -> Message | None:
    """SaslHandshake v1 then SaslAuthenticate v1 frames: the last SaslAuthenticate response
    (error_code 0 when authenticated), None if the gateway closed the connection."""
    handshake = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if handshake is None or handshake["error_code"]:
        return handshake
    if mechanism == "PLAIN":
        return connection.request(
            ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": plain_token(name, password)}
        )
    client = ScramClient(mechanism, name, password)
    first = connection.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()})
    if first is None or first["error_code"]:
        return first
    final = connection.request(
        ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final(first["auth_bytes"])}
    )
    if final is not None and not final["error_code"]:
        assert client.server_verified(final["auth_bytes"]), "the server's signature is wrong"
    return final
