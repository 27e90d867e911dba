"""A minimal Kafka protocol client for broker-to-broker requests (followers' Fetch and
OffsetForLeaderEpoch to their leader): one connection, requests answered in order.

Requests are kio entities; flexible versions are sent with request header v2, SaslHandshake
v1 (never flexible) with header v1. Record bytes in an answer stay one memoryview slice of
the frame (no per-record work). The connection speaks the inter-broker listener's protocol
(``broker.security.inter_broker``): TLS and/or a SASL login right after connecting (KIP-152:
SaslHandshake v1, then SaslAuthenticate).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from typing import Any

from kio.schema.sasl_authenticate.v2 import request as sasl_auth_req
from kio.schema.sasl_handshake.v1 import request as sasl_handshake_req
from kio.serial import entity_reader, entity_writer

from broker.security.inter_broker import PLAINTEXT, InterBrokerSecurity
from broker.security.sasl_client import SaslClientFailure, client_exchange
from protocol.codec import response_schema

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
MAX_FRAME = 256 * 1024 * 1024
API_VERSIONS_KEY = 18


class ConnectionLost(Exception):
    pass


class AuthenticationFailed(ConnectionLost):
    """The other broker refused this broker's login (or TLS handshake): a configuration
    problem worth a warning, retried like any lost connection."""


class _Collector(list):  # type: ignore[type-arg]
    write = list.append


class KafkaConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        security: InterBrokerSecurity = PLAINTEXT,
    ) -> None:
        self.host, self.port, self._client_id = host, port, client_id.encode()
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    async def _connect(self, timeout: float) -> None:
        context = self.security.ssl_context
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=self.host if context is not None else None,
                ),
                timeout,
            )
        except ssl.SSLError as exc:
            raise AuthenticationFailed(f"{self.host}:{self.port}: TLS: {exc}") from None
        if self.security.sasl is not None:
            await self._login(timeout)

    async def _login(self, timeout: float) -> None:
        """KIP-152: SaslHandshake v1 names the mechanism, SaslAuthenticate carries the
        exchange. Any refusal raises AuthenticationFailed (the connection is closed)."""
        credentials = self.security.sasl
        assert credentials is not None
        where = f"{self.host}:{self.port}"
        handshake = await self._roundtrip(
            sasl_handshake_req.SaslHandshakeRequest(mechanism=credentials.mechanism), timeout
        )
        if handshake.error_code != 0:
            raise AuthenticationFailed(
                f"{where}: SASL mechanism {credentials.mechanism} refused "
                f"({handshake.error_code.name}; enabled: {list(handshake.mechanisms)})"
            )
        exchange = client_exchange(credentials)
        message: bytes | None = exchange.first()
        for _step in range(4):  # PLAIN takes one round, SCRAM two
            assert message is not None
            answer = await self._roundtrip(
                sasl_auth_req.SaslAuthenticateRequest(auth_bytes=message), timeout
            )
            if answer.error_code != 0:
                raise AuthenticationFailed(
                    f"{where}: SASL {credentials.mechanism} login as {credentials.username!r} "
                    f"refused: {answer.error_message or answer.error_code.name}"
                )
            try:
                message = exchange.step(bytes(answer.auth_bytes))
            except SaslClientFailure as exc:
                raise AuthenticationFailed(f"{where}: {exc}") from None
            if exchange.done:
                return
        raise AuthenticationFailed(f"{where}: the SASL exchange does not end")

    async def _roundtrip(self, request: Any, timeout: float) -> Any:
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        flexible = bool(request.__flexible__)
        body = _Collector()
        entity_writer(type(request))(body, request)
        header = (
            _HEADER.pack(
                int(request.__api_key__),
                int(request.__version__),
                self._correlation,
                len(self._client_id),
            )
            + self._client_id
            # Request header v2 ends with (empty) tagged fields; v1 does not.
            + (b"\x00" if flexible else b"")
        )
        payload = header + b"".join(bytes(p) for p in body)
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        await self._writer.drain()
        raw = await asyncio.wait_for(self._reader.readexactly(4), timeout)
        (size,) = _SIZE.unpack(raw)
        if not 4 <= size <= MAX_FRAME:
            raise ConnectionLost(f"bad frame size {size}")
        frame = memoryview(await asyncio.wait_for(self._reader.readexactly(size), timeout))
        (correlation,) = _SIZE.unpack_from(frame, 0)
        if correlation != self._correlation:
            raise ConnectionLost("answer to another request")
        schema = response_schema(int(request.__api_key__), int(request.__version__))
        # Response header v1 (flexible): correlation id, then (empty) tagged fields; v0 has
        # no tagged fields (SaslHandshake's answer, and ApiVersions' at every version: a
        # client must read it before it knows which versions the broker speaks).
        header_v1 = flexible and int(request.__api_key__) != API_VERSIONS_KEY
        value, _ = entity_reader(schema)(frame, 5 if header_v1 else 4)
        return value

    async def request(self, request: Any, timeout: float) -> Any:
        """Send one request and wait for its answer; ConnectionLost on any I/O problem
        (the connection is then closed and reopened, with a new login, by the next
        request)."""
        async with self._lock:
            try:
                if self._writer is None:
                    await self._connect(timeout)
                return await self._roundtrip(request, timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise ConnectionLost(f"{self.host}:{self.port}: {exc!r}") from exc
            except ConnectionLost:
                self.close()
                raise
            except Exception as exc:
                # Hostile or garbled answer bytes (kio's readers raise many kinds).
                self.close()
                raise ConnectionLost(f"{self.host}:{self.port}: bad answer: {exc!r}") from exc

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None
