"""The TCP side: one asyncio BufferedProtocol per connection.

Requests of a connection are admitted strictly in order, like Kafka does, but a
handler may answer with a future (a produce waiting for its commit, a fetch
waiting for data); the connection then moves on to the next request and writes
answers in request order as they complete. So pipelined produce requests share
a flush instead of waiting for each other.

Bytes are read straight into a per-connection buffer (protocol.framing.FrameReader)
and each request is decoded as soon as its frame is complete; the inbox holds
decoded requests. Backpressure is by bytes: a connection whose requests waiting
for admission or for their answer hold more than its budget is not read from
until answers go out.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import logging
import socket
import ssl
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from broker.security import sasl as sasl_mod
from broker.security.listeners import DEFAULT_LISTENER
from broker.security.principal import ANONYMOUS, user_of
from broker.security.request_context import RequestContext
from broker.security.tls import certificate_principal
from broker.server.client_quotas import QuotaManager, settle_request
from broker.server.connection_limits import ConnectionLimits, LimitSettings
from broker.server.handler_helpers import fetch_replica_id
from broker.server.log_budget import TRACEBACKS, LineBudget
from broker.server.metrics import METRICS
from broker.server.refusals import REFUSALS
from broker.server.slow_requests import note_slow_produce
from protocol.build import build, error_response
from protocol.codec import (
    API_VERSIONS_KEY,
    EncodedResponse,
    MalformedRequest,
    RequestHeader,
    decode_body,
    encode_response,
    parse_request_header,
    request_schema,
    response_schema,
)
from protocol.framing import FrameReader, FrameTooLarge

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    """One Kafka API as the pipeline dispatches it (the table: broker/server/api_table.py)."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    unsupported_version_response: Callable[[], Any] = lambda: None


ApiTable = dict[int, Api]


MiB = 1024 * 1024
FETCH_KEY = 1  # Kafka counts a Fetch also as FetchConsumer or FetchFollower
# Stop reading from a client whose requests waiting to be admitted or answered hold
# this many bytes. A produce request is held until its flush is committed (commit
# interval + upload + commit: 0.3-1 s on SeaweedFS under load), so one connection moves
# at most budget / that per second: 64 MiB is 64-200 MiB/s. The count of 64 requests
# this replaces capped a producer of 16 KiB batches (one batch per request) at ~3.6 MiB/s.
DEFAULT_PENDING_BYTES = 64 * MiB
# Charged per request on top of its frame: the decoded request, its future and its
# answer. Bounds a flood of tiny pipelined requests (16k per 64 MiB) the same way.
REQUEST_OVERHEAD_BYTES = 4096
# Answers not scanned for errors to log: Produce and Fetch are the hot path (the produce
# path notes its own refusals, bad batches, where it decides them), and ApiVersions' only
# error is the version negotiation every client may go through.
_UNSCANNED_APIS = frozenset((0, 1, API_VERSIONS_KEY))
# A client can open connections and send garbage as fast as it likes (the protocol fuzzer
# manages ~2,000 a second); a line for each would let it fill the disk through the log.
# Past this many lines a second, closes are only counted (the bad_frames metric) and the
# next line logged says how many went unlogged.
CLOSE_LOG_LINES_PER_S = 20
# Kafka's connection.failed.authentication.delay.ms default.
FAILED_AUTH_CLOSE_DELAY_S = 0.1


class CloseLog:
    """The one WARNING line per connection closed for a bad request, rate-limited."""

    def __init__(
        self, per_second: int = CLOSE_LOG_LINES_PER_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._budget = LineBudget(per_second, clock)

    @property
    def unlogged(self) -> int:
        return self._budget.unlogged

    def closing(self, peer: tuple[str, int], detail: str) -> None:
        suffix = self._budget.take()
        if suffix is not None:
            log.warning("closing connection from %s:%s: %s%s", peer[0], peer[1], detail, suffix)


_CLOSE_LOG = CloseLog()


class _Answer:
    __slots__ = (
        "admitted",
        "api_name",
        "cost",
        "fetch_kind",
        "future",
        "header",
        "received",
        "response_type",
    )

    def __init__(
        self,
        header: RequestHeader,
        future: asyncio.Future[Any],
        response_type: type,
        api_name: str,
        cost: int,
        received: float,
        fetch_kind: str | None = None,
    ) -> None:
        self.header = header
        self.future = future
        self.response_type = response_type
        self.api_name = api_name
        self.cost = cost
        # For the request metrics: when the request was read (time.perf_counter()), and
        # for a Fetch, FetchConsumer or FetchFollower (Kafka counts it under both names).
        self.received = received
        self.fetch_kind = fetch_kind
        self.admitted = received  # time.perf_counter() when its handler was called


class _Request:
    """A decoded request waiting in the inbox: a body for the handler, an answer known
    already (unsupported version), or the reason to close the connection."""

    __slots__ = (
        "api",
        "body",
        "cost",
        "failure",
        "header",
        "raw_token",
        "ready_answer",
        "received",
        "response_type",
    )

    def __init__(
        self,
        cost: int,
        header: RequestHeader | None = None,
        api: Api | None = None,
        response_type: type | None = None,
        body: Any = None,
        ready_answer: Any = None,
        failure: tuple[str, str] | None = None,
        raw_token: bytes | None = None,
    ) -> None:
        self.cost = cost
        self.raw_token = raw_token  # a bare SASL token (after SaslHandshake v0)
        self.header = header
        self.api = api
        self.response_type = response_type
        self.body = body
        self.ready_answer = ready_answer
        self.failure = failure
        self.received = 0.0  # time.perf_counter() when read off the socket


class ListenerSecurity(NamedTuple):
    """How one listener's connections authenticate: TLS (SSL, SASL_SSL), SASL, both, neither."""

    name: str = DEFAULT_LISTENER
    ssl_context: ssl.SSLContext | None = None
    sasl: sasl_mod.SaslAuthenticator | None = None


PLAINTEXT = ListenerSecurity()


_NO_THROTTLE = datetime.timedelta(0)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self,
        apis: ApiTable,
        max_frame: int,
        registry: set[KafkaConnection],
        pending_bytes: int = DEFAULT_PENDING_BYTES,
        security: ListenerSecurity = PLAINTEXT,
        # The request quota: a request's handling time is recorded against it, in percent
        # of a second as Kafka counts, when any client has one.
        request_quota: QuotaManager | None = None,
        limits: ConnectionLimits | None = None,
        exempt: bool = False,
    ) -> None:
        self._apis = apis
        self._security = security
        # Kafka's connection limits (broker/server/connection_limits.py), shared by the broker's
        # listeners; ``exempt``: the inter-broker listener, outside max.connections.
        self._limits = limits or ConnectionLimits(LimitSettings())
        self._exempt = exempt
        self._counted = False  # admitted by the limits (released when it closes)
        self._opened_ms = 0.0
        self.last_active_ms = 0.0
        # Bytes of queued.max.request.bytes this connection holds for the large request it
        # is receiving; waiting: in the pool's waiters (every listener's connections).
        self._reserved = 0
        self._memory_wait = False
        self._principal = ANONYMOUS
        # The principal's user name, as quotas name a client: derived once per principal.
        self._user = user_of(ANONYMOUS)
        self._sasl: sasl_mod.SaslSession | None = None
        self._close_when_written = False
        self._request_quota = request_quota
        # KIP-219: after answering a throttled request the connection is not read from
        # until this loop time (the client waits out its throttle time too).
        self._muted_until = 0.0
        self._unmute: asyncio.TimerHandle | None = None
        self._registry = registry
        self._draining = False
        self._max_frame = max_frame
        self._reader = FrameReader(max_frame)
        self._budget = pending_bytes
        self._pending = 0  # bytes charged for the inbox and for unwritten answers
        self._transport: asyncio.Transport | None = None
        self._peer: tuple[str, int] = ("?", 0)
        self._inbox: collections.deque[_Request] = collections.deque()
        self._answers: collections.deque[_Answer] = collections.deque()
        self._worker: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False

    # -- asyncio.Protocol -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses; they behave as one.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self._peer = (peer[0], peer[1])
        now = time.monotonic() * 1000
        refusal = self._limits.admit(self._peer[0], self._exempt, now)
        if refusal is not None:
            # Closed before anything is read or allocated for it, as Kafka does.
            self._abort("connection_limit", refusal)
            return
        self._counted = True
        self._opened_ms = self.last_active_ms = now
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._security.ssl_context is not None:
            # Called once the TLS handshake is done: the client certificate is known.
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            try:
                self._principal = certificate_principal(der)
            except Exception:
                # OpenSSL accepted the certificate; one cryptography cannot read gets no
                # name rather than taking the connection (or the broker) down.
                log.warning("unreadable client certificate from %s:%s", *self._peer)
                self._principal = ANONYMOUS
            self._user = user_of(self._principal)
        if self._security.sasl is not None:
            self._sasl = sasl_mod.SaslSession(self._security.sasl)
            # Until authenticated, frames are small (Kafka's sasl.server.max.receive.size).
            self._reader.max_size = min(self._reader.max_size, sasl_mod.MAX_UNAUTHENTICATED_FRAME)
        self._registry.add(self)
        self._worker = asyncio.create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active_ms = time.monotonic() * 1000
        try:
            frames = self._reader.frames_received(nbytes)
        except FrameTooLarge as exc:
            self._abort("frame_size", str(exc))
            return
        self._account_receiving()
        if not frames or self._draining or self._closed:
            return
        # Decoded now: the frames are views of the read buffer, reused by the next read.
        sasl = self._sasl
        received = time.perf_counter()
        for frame in frames:
            if sasl is not None and sasl.raw_tokens:
                # The frame after a SaslHandshake v0 answer is a bare SASL token. Clients
                # wait for each answer, so the flag is set before their next frame arrives.
                request = _Request(len(frame) + REQUEST_OVERHEAD_BYTES, raw_token=bytes(frame))
            else:
                request = self._decode(frame)
            request.received = received
            self._pending += request.cost
            self._inbox.append(request)
        self._reader.release()
        self._wakeup.set()
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        self._closed = True
        if self._counted:
            self._counted = False
            self._limits.release(self._peer[0])
        self._limits.memory_waiters.discard(self._retry_memory)
        self._set_reserved(0)
        self._wakeup.set()
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        for answer in self._answers:
            if not answer.future.done():
                answer.future.cancel()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # -- shutdown ---------------------------------------------------------
    def drain(self) -> None:
        """Stop taking requests; those already admitted are still answered."""
        self._draining = True
        self._pending -= sum(r.cost for r in self._inbox)
        self._inbox.clear()
        self._update_reading()

    @property
    def idle(self) -> bool:
        return not self._answers

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()

    def expired(self, now_ms: float) -> None:
        """Close the connection if it is past connections.max.idle.ms (with nothing left
        to answer) or has not authenticated in time (the server sweeps once a second)."""
        if self._closed or not self._counted:
            return
        authenticated = self._sasl is None or self._sasl.authenticated
        last = self.last_active_ms if not self._answers else now_ms
        reason = self._limits.expired(self._opened_ms, last, authenticated, now_ms)
        if reason is not None:
            self._abort("expired", reason)

    def _account_receiving(self) -> None:
        """Reserve (or return) pool memory for the large request being received; a
        connection the pool cannot serve stops reading until memory is returned."""
        need = self._reader.incomplete_size
        if need <= self._reserved:
            if need < self._reserved:
                self._set_reserved(need)
            return
        if self._limits.may_buffer(need - self._reserved):
            self._set_reserved(need)
        elif not self._memory_wait:
            self._memory_wait = True
            self._limits.memory_waiters.add(self._retry_memory)
            self._update_reading()

    def _set_reserved(self, size: int) -> None:
        if size == self._reserved:
            return
        freed = size < self._reserved
        self._limits.receiving_bytes += size - self._reserved
        self._reserved = size
        if freed and self._limits.memory_waiters:
            for retry in list(self._limits.memory_waiters):
                retry()

    def _retry_memory(self) -> None:
        need = self._reader.incomplete_size
        if self._closed or self._limits.may_buffer(need - self._reserved):
            self._limits.memory_waiters.discard(self._retry_memory)
            self._memory_wait = False
            if not self._closed:
                self._set_reserved(need)  # more than before: wakes nobody
                self._update_reading()

    # -- internals --------------------------------------------------------
    def _update_reading(self) -> None:
        if self._transport is None or self._closed:
            return
        busy = (
            self._draining
            or self._writing_paused
            or self._pending >= self._budget
            or self._unmute is not None
            or self._memory_wait
        )
        if busy and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not busy and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    def _throttle(self, throttle_ms: int) -> None:
        """Stop reading from this client for ``throttle_ms`` (KIP-219's muted channel)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = loop.call_at(until, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        self._unmute = None
        self._wakeup.set()
        self._update_reading()

    def _abort(self, reason: str, detail: str) -> None:
        _CLOSE_LOG.closing(self._peer, detail)
        METRICS.bad_frames.labels(reason).inc()
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    async def _run(self) -> None:
        while not self._closed:
            if not self._inbox or self._unmute is not None:
                # Nothing to do, or muted: a throttled client's next request waits.
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            request = self._inbox.popleft()
            try:
                await self._admit(request)
            except Exception:
                TRACEBACKS.log(
                    log,
                    "admit",
                    sys.exc_info()[1],
                    "unexpected error admitting a request from %s:%s",
                    *self._peer,
                )
                self._abort("internal", "internal error")
                return
            self._update_reading()

    def _decode(self, frame: memoryview) -> _Request:
        cost = len(frame) + REQUEST_OVERHEAD_BYTES
        try:
            header, offset = parse_request_header(frame)
            api = self._apis.get(header.api_key)
            if api is None:
                raise MalformedRequest(f"unsupported API key {header.api_key}")
            if not api.min_version <= header.api_version <= api.max_version:
                if header.api_key == API_VERSIONS_KEY:
                    # Kafka answers a too-new ApiVersions at v0 so the client can downgrade.
                    answer = api.unsupported_version_response()
                    return _Request(cost, header, api, type(answer), ready_answer=answer)
                if request_schema(header.api_key, header.api_version) is None:
                    raise MalformedRequest(
                        f"{api.name} v{header.api_version} is not a version this broker knows"
                    )
                response_type = response_schema(header.api_key, header.api_version)
                answer = error_response(response_type, ErrorCode.unsupported_version)
                return _Request(cost, header, api, response_type, ready_answer=answer)
            schema = request_schema(header.api_key, header.api_version)
            assert schema is not None
            body = decode_body(schema, frame, offset)
            response_type = response_schema(header.api_key, header.api_version)
            return _Request(cost, header, api, response_type, body)
        except MalformedRequest as exc:
            return _Request(cost, failure=("malformed", str(exc)))
        except Exception:
            TRACEBACKS.log(
                log,
                "decode",
                sys.exc_info()[1],
                "unexpected error decoding a request from %s:%s",
                *self._peer,
            )
            return _Request(cost, failure=("internal", "internal error"))

    async def _admit(self, request: _Request) -> None:
        if request.failure is not None:
            self._abort(*request.failure)
            return
        if request.raw_token is not None:
            self._sasl_raw_token(request)
            return
        header, api, response_type = request.header, request.api, request.response_type
        assert header is not None and api is not None and response_type is not None
        key = header.api_key
        sasl = self._sasl
        if sasl is not None and key not in sasl_mod.PRE_AUTH_APIS:
            # Kafka closes a connection that sends anything else before authenticating,
            # and one used for anything but re-authentication after its session (KIP-368)
            # ended. An idle expired connection is left alone, as in Kafka: it can still
            # re-authenticate, and serves nothing until it does.
            if not sasl.authenticated:
                self._abort("sasl", f"{api.name} request before SASL authentication")
                return
            if sasl.expired():
                self._abort("reauth", f"{api.name} request after the SASL session expired")
                return
        if request.ready_answer is not None:
            self._queue(
                header,
                request.ready_answer,
                response_type,
                api.name,
                request.cost,
                request.received,
            )
            return
        if key in (sasl_mod.SASL_HANDSHAKE_KEY, sasl_mod.SASL_AUTHENTICATE_KEY):
            self._sasl_request(header, response_type, api.name, request)
            return
        ctx = RequestContext(
            header, response_type, *self._peer, self._principal, self._security.name
        )
        _request_counter(api.name).inc()
        admitted = time.perf_counter()
        started = admitted if self._request_quota is not None else 0.0
        try:
            result = await api.handler(ctx, request.body)
        except Exception:
            TRACEBACKS.log(log, api.name, sys.exc_info()[1], "%s handler failed", api.name)
            METRICS.request_errors.labels(api.name).inc()
            result = _error_or_none(response_type, ErrorCode.unknown_server_error)
            if result is None:
                self._abort("internal", f"{api.name} handler failed")
                return
        result, throttle_ms = settle_request(
            self._request_quota,
            self._user,
            header.client_id or "",
            result,
            time.perf_counter() - started,
        )
        if throttle_ms > 0:
            self._throttle(throttle_ms)
        fetch_kind = None
        if key == FETCH_KEY:
            fetch_kind = "FetchFollower" if fetch_replica_id(request.body) >= 0 else "FetchConsumer"
        if result is None:
            self._pending -= request.cost  # nothing to send back
            _record_time(api.name, fetch_kind, header.api_version, request.received)
            return
        if isinstance(result, asyncio.Future):
            answer = _Answer(
                header,
                result,
                response_type,
                api.name,
                request.cost,
                request.received,
                fetch_kind,
            )
            answer.admitted = admitted
            self._answers.append(answer)
            result.add_done_callback(self._on_answer_done)
        else:
            self._queue(
                header,
                result,
                response_type,
                api.name,
                request.cost,
                request.received,
                fetch_kind,
            )

    def _sasl_request(
        self, header: RequestHeader, response_type: type, name: str, request: _Request
    ) -> None:
        """SaslHandshake and SaslAuthenticate: connection state, so answered here."""
        sasl, body, close = self._sasl, request.body, False
        if sasl is None:
            # Kafka's answer on a listener without SASL.
            answer: dict[str, Any] = {
                "error_code": int(ErrorCode.illegal_sasl_state),
                "error_message": f"SASL is not enabled on listener {self._security.name}",
            }
            close = header.api_key == sasl_mod.SASL_AUTHENTICATE_KEY
        else:
            try:
                if header.api_key == sasl_mod.SASL_HANDSHAKE_KEY:
                    answer = sasl.handshake(header.api_version, body.mechanism)
                else:
                    was = sasl.principal
                    answer, close = sasl.authenticate(header.api_version, body.auth_bytes)
                    if not close and sasl.principal is not None:
                        self._authenticated(was)
            except sasl_mod.CloseConnection as exc:
                self._abort("sasl", str(exc))
                return
            if close:
                _CLOSE_LOG.closing(self._peer, answer.get("error_message") or "SASL failed")
                METRICS.bad_frames.labels("sasl").inc()
        if close:
            # The answer goes out first: it carries the message the client shows its user.
            self._close_when_written = True
            self._pending_stop_reading()
        self._queue(
            header,
            build(response_type, answer),
            response_type,
            name,
            request.cost,
            request.received,
        )

    def _sasl_raw_token(self, request: _Request) -> None:
        """A bare token of a SaslHandshake v0 exchange, answered with a bare token."""
        sasl, transport = self._sasl, self._transport
        assert sasl is not None and request.raw_token is not None
        if self._answers or transport is None:
            self._abort("sasl", "SASL token while answers are pending")
            return
        try:
            challenge = sasl.authenticate_raw(request.raw_token)
        except sasl_mod.AuthenticationFailed as exc:
            self._abort("sasl", str(exc))  # v0 cannot carry an error: Kafka just closes
            return
        self._pending -= request.cost
        transport.write(struct.pack(">i", len(challenge)) + challenge)
        if sasl.principal is not None:
            self._authenticated(None)

    def _authenticated(self, previous: str | None) -> None:
        sasl = self._sasl
        assert sasl is not None and sasl.principal is not None
        if previous is None:
            self._principal = sasl.principal
            self._user = user_of(sasl.principal)
            self._reader.max_size = self._max_frame

    def _pending_stop_reading(self) -> None:
        self._draining = True
        self._pending -= sum(r.cost for r in self._inbox)
        self._inbox.clear()

    def _queue(
        self,
        header: RequestHeader,
        response: Any,
        response_type: type,
        name: str,
        cost: int,
        received: float,
        fetch_kind: str | None = None,
    ) -> None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(response)
        self._answers.append(
            _Answer(header, future, response_type, name, cost, received, fetch_kind)
        )
        self._write_ready()

    def _on_answer_done(self, _future: asyncio.Future[Any]) -> None:
        self._write_ready()

    def _write_ready(self) -> None:
        transport = self._transport
        # Every answer that is ready goes out in one writelines: the answers of a flush
        # complete together, and one send for all of them beats one send each.
        out: list[bytes | memoryview] = []
        while self._answers and self._answers[0].future.done():
            answer = self._answers.popleft()
            self._pending -= answer.cost
            if self._closed or transport is None:
                continue
            _record_time(
                answer.api_name, answer.fetch_kind, answer.header.api_version, answer.received
            )
            if answer.api_name == "Produce":
                note_slow_produce(answer.header, answer.received, answer.admitted, self._peer)
            future = answer.future
            if future.cancelled():
                # Only shutdown cancels answers. Closing without an answer makes the
                # client retry, where an empty error answer would be malformed for it.
                self._abort("shutdown", "answer cancelled")
                return
            if future.exception() is not None:
                TRACEBACKS.log(
                    log, answer.api_name, future.exception(), "%s failed", answer.api_name
                )
                METRICS.request_errors.labels(answer.api_name).inc()
                response = _error_or_none(answer.response_type, ErrorCode.unknown_server_error)
                if response is None:
                    self._abort("internal", f"{answer.api_name} failed")
                    return
            else:
                response = future.result()
            if response is None:
                continue  # acks=0 produce: held its bytes until committed, sends nothing
            if type(response) is EncodedResponse:
                if response.throttle_ms > 0:
                    self._throttle(response.throttle_ms)
            else:
                throttled = getattr(response, "throttle_time", _NO_THROTTLE)
                if isinstance(throttled, datetime.timedelta) and throttled > _NO_THROTTLE:
                    self._throttle(round(throttled.total_seconds() * 1000))
            header = answer.header
            if header.api_key not in _UNSCANNED_APIS and type(response) is not EncodedResponse:
                REFUSALS.note_response(header.client_id, *self._peer, answer.api_name, response)
            out += encode_response(header.correlation_id, response)
        if out and transport is not None and not self._closed:
            transport.writelines(out)
            self.last_active_ms = time.monotonic() * 1000
        if self._close_when_written and not self._answers and not self._closed:
            # As Kafka (connection.failed.authentication.delay.ms): close a moment after
            # the failure answer, so the client reads the answer before it sees the end of
            # the connection (kafka-python reported only "disconnected" otherwise), and a
            # client retrying wrong passwords in a loop is slowed down.
            self._closed = True
            if transport is not None:
                asyncio.get_running_loop().call_later(FAILED_AUTH_CLOSE_DELAY_S, transport.close)
            return
        self._update_reading()


def _record_time(name: str, fetch_kind: str | None, version: int, received: float) -> None:
    """Kafka's request metrics of an answered request (``broker.server.metrics``)."""
    ms = (time.perf_counter() - received) * 1000
    METRICS.request_times.record(name, version, ms)
    if fetch_kind is not None:
        METRICS.request_times.record(fetch_kind, version, ms)


@functools.cache
def _request_counter(api_name: str) -> Any:
    """The labelled child of the requests counter (labels() is a locked dict lookup)."""
    return METRICS.requests.labels(api_name)


def _error_or_none(response_type: type, error: ErrorCode) -> Any:
    """A whole-request error answer, if the API has a top-level error code. Others
    (Produce, ...) answer per partition, and an answer without the partitions asked
    about is malformed to clients: the connection is closed instead."""
    if "error_code" not in response_type.__dataclass_fields__:
        return None
    return error_response(response_type, error)
