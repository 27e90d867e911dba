"""The TCP side: one asyncio Protocol per connection.

Requests of a connection are admitted strictly in order, like Kafka does, but a
handler may answer with a future (a produce waiting for its commit, a fetch
waiting for data); the connection then moves on to the next request and writes
answers in request order as they complete. So pipelined produce requests share
a flush instead of waiting for each other.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from protocol.build import build, error_response
from protocol.codec import (
    API_VERSIONS_KEY,
    MalformedRequest,
    RequestHeader,
    decode_body,
    encode_response,
    parse_request_header,
    request_schema,
    response_schema,
)
from protocol.framing import FrameDecoder, FrameTooLarge

from .metrics import METRICS

if TYPE_CHECKING:
    from .apis import ApiTable

log = logging.getLogger(__name__)

# Stop reading from a client that has this many answers outstanding.
MAX_PENDING = 64


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    response_type: type
    client_host: str
    client_port: int

    def respond(self, data: dict[str, Any]) -> Any:
        return build(self.response_type, data)


class _Answer:
    __slots__ = ("api_name", "correlation_id", "future", "response_type")

    def __init__(
        self, correlation_id: int, future: asyncio.Future[Any], response_type: type, api_name: str
    ) -> None:
        self.correlation_id = correlation_id
        self.future = future
        self.response_type = response_type
        self.api_name = api_name


class KafkaConnection(asyncio.Protocol):
    def __init__(self, apis: ApiTable, max_frame: int, registry: set[KafkaConnection]) -> None:
        self._apis = apis
        self._registry = registry
        self._draining = False
        self._decoder = FrameDecoder(max_frame)
        self._transport: asyncio.Transport | None = None
        self._peer: tuple[str, int] = ("?", 0)
        self._inbox: collections.deque[memoryview] = collections.deque()
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
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._registry.add(self)
        self._worker = asyncio.create_task(self._run())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            self._abort("frame_size", str(exc))
            return
        if frames:
            self._inbox.extend(frames)
            self._wakeup.set()
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        self._closed = True
        self._wakeup.set()
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
        self._inbox.clear()
        self._update_reading()

    @property
    def idle(self) -> bool:
        return not self._answers

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()

    # -- internals --------------------------------------------------------
    def _update_reading(self) -> None:
        if self._transport is None or self._closed:
            return
        busy = (
            self._draining
            or self._writing_paused
            or len(self._answers) + len(self._inbox) >= MAX_PENDING
        )
        if busy and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not busy and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    def _abort(self, reason: str, detail: str) -> None:
        log.warning("closing connection from %s:%s: %s", *self._peer, detail)
        METRICS.bad_frames.labels(reason).inc()
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    async def _run(self) -> None:
        while not self._closed:
            if not self._inbox:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            frame = self._inbox.popleft()
            try:
                await self._admit(frame)
            except MalformedRequest as exc:
                self._abort("malformed", str(exc))
                return
            except Exception:
                log.exception("unexpected error admitting a request from %s:%s", *self._peer)
                self._abort("internal", "internal error")
                return
            self._update_reading()

    async def _admit(self, frame: memoryview) -> None:
        header, offset = parse_request_header(frame)
        api = self._apis.get(header.api_key)
        if api is None:
            raise MalformedRequest(f"unsupported API key {header.api_key}")
        if not api.min_version <= header.api_version <= api.max_version:
            if header.api_key == API_VERSIONS_KEY:
                # Kafka answers a too-new ApiVersions at v0 so the client can downgrade.
                response = api.unsupported_version_response()
                self._queue(header.correlation_id, response, type(response), api.name)
                return
            if request_schema(header.api_key, header.api_version) is None:
                raise MalformedRequest(
                    f"{api.name} v{header.api_version} is not a version this broker knows"
                )
            response_type = response_schema(header.api_key, header.api_version)
            response = error_response(response_type, ErrorCode.unsupported_version)
            self._queue(header.correlation_id, response, response_type, api.name)
            return
        schema = request_schema(header.api_key, header.api_version)
        assert schema is not None
        request = decode_body(schema, frame, offset)
        response_type = response_schema(header.api_key, header.api_version)
        ctx = RequestContext(header, response_type, *self._peer)
        METRICS.requests.labels(api.name).inc()
        try:
            result = await api.handler(ctx, request)
        except Exception:
            log.exception("%s handler failed", api.name)
            METRICS.request_errors.labels(api.name).inc()
            result = _error_or_none(response_type, ErrorCode.unknown_server_error)
            if result is None:
                self._abort("internal", f"{api.name} handler failed")
                return
        if result is None:
            return  # acks=0 produce: Kafka sends nothing back
        if isinstance(result, asyncio.Future):
            self._answers.append(_Answer(header.correlation_id, result, response_type, api.name))
            result.add_done_callback(self._on_answer_done)
        else:
            self._queue(header.correlation_id, result, response_type, api.name)

    def _queue(self, correlation_id: int, response: Any, response_type: type, name: str) -> None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(response)
        self._answers.append(_Answer(correlation_id, future, response_type, name))
        self._write_ready()

    def _on_answer_done(self, _future: asyncio.Future[Any]) -> None:
        self._write_ready()

    def _write_ready(self) -> None:
        transport = self._transport
        while self._answers and self._answers[0].future.done():
            answer = self._answers.popleft()
            if self._closed or transport is None:
                continue
            future = answer.future
            if future.cancelled():
                # Only shutdown cancels answers. Closing without an answer makes the
                # client retry, where an empty error answer would be malformed for it.
                self._abort("shutdown", "answer cancelled")
                return
            if future.exception() is not None:
                log.error("%s failed", answer.api_name, exc_info=future.exception())
                METRICS.request_errors.labels(answer.api_name).inc()
                response = _error_or_none(answer.response_type, ErrorCode.unknown_server_error)
                if response is None:
                    self._abort("internal", f"{answer.api_name} failed")
                    return
            else:
                response = future.result()
            if response is None:
                continue
            transport.writelines(encode_response(answer.correlation_id, response))
        self._update_reading()


def _error_or_none(response_type: type, error: ErrorCode) -> Any:
    """A whole-request error answer, if the API has a top-level error code. Others
    (Produce, ...) answer per partition, and an answer without the partitions asked
    about is malformed to clients: the connection is closed instead."""
    if "error_code" not in response_type.__dataclass_fields__:
        return None
    return error_response(response_type, error)


class KafkaServer:
    def __init__(self, apis: ApiTable, host: str, port: int, max_frame: int) -> None:
        self._apis = apis
        self._host = host
        self._port = port
        self._max_frame = max_frame
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[KafkaConnection] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self._apis, self._max_frame, self._connections),
            self._host,
            self._port,
            reuse_address=True,
            backlog=1024,
        )

    def stop_accepting(self) -> None:
        """Stop listening and stop reading requests; admitted ones still complete."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.drain()

    async def close(self, timeout: float = 10.0) -> None:
        """Wait (bounded) for admitted requests to be answered, then disconnect."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(not c.idle for c in self._connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self._connections):
            connection.close()
