"""TCP transport between voters: one outgoing connection per peer, length-prefixed frames.

A connection starts with a handshake that binds everything after it to that connection:

1. The receiving voter sends 16 random bytes (the connection's challenge) as it accepts.
2. The connecting voter answers with frame 0, the hello (``HELLO`` and its node id).
3. Every frame is ``u32 length | 32-byte MAC | payload`` with
   ``MAC = HMAC-SHA256(secret, challenge | u64 frame number | payload)``; frame numbers
   count 0, 1, 2, ... on the connection, and ``length`` counts the MAC and the payload.

A frame whose MAC does not verify closes the connection before anything is decoded, so only
holders of the shared secret can speak Raft to a voter. A recorded frame replayed on another
connection meets another challenge, and on the same one another frame number: it is refused.
Until the hello has verified, a frame may not exceed ``HELLO_MAX`` bytes, so a stranger can
make a voter hold no more than that per connection (the 64 MiB frame limit, for snapshots,
applies only to authenticated peers). ``dst`` is inside the MAC, so a frame cannot be
redirected to another voter. With TLS contexts (the controller's certificate settings) the
link is also encrypted: the metadata log carries SCRAM salts and stored keys.

Delivery is best effort, as Raft expects: a message for a peer that is not connected, or whose
queue is full, is dropped and Raft's retransmission (heartbeats) repairs it. Connections are
re-established with a short backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import ssl
import struct
from collections.abc import Callable, Mapping

from controller.raft.messages import DecodeError, Message, decode, encode

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">Q")
_MAC_SIZE = 32
_CHALLENGE_SIZE = 16
HELLO = b"sluice-raft/2"
_NODE = struct.Struct(">i")
HELLO_MAX = 64  # bytes of payload before the peer is authenticated
HANDSHAKE_TIMEOUT_S = 5.0
DEFAULT_MAX_FRAME = 64 << 20  # a snapshot travels in one frame


class _Signer:
    """The MACs of one connection's frames, in order (see the module docstring)."""

    __slots__ = ("_base", "_seq")

    def __init__(self, secret: bytes, challenge: bytes) -> None:
        self._base = hmac.new(secret, challenge, hashlib.sha256)
        self._seq = 0

    def mac(self, chunks: list[bytes] | list[memoryview]) -> bytes:
        mac = self._base.copy()
        mac.update(_SEQ.pack(self._seq))
        self._seq += 1
        for c in chunks:
            mac.update(c)
        return mac.digest()

    def frame(self, chunks: list[bytes]) -> list[bytes]:
        size = sum(len(c) for c in chunks)
        return [_LEN.pack(_MAC_SIZE + size), self.mac(chunks), *chunks]


class TcpTransport:
    def __init__(
        self,
        node_id: int,
        peers: Mapping[int, tuple[str, int]],
        *,
        secret: bytes,
        on_message: Callable[[Message], None],
        max_frame: int = DEFAULT_MAX_FRAME,
        queue_limit: int = 4096,
        connect_timeout: float = 1.0,
        server_ssl: ssl.SSLContext | None = None,
        client_ssl: ssl.SSLContext | None = None,
    ) -> None:
        if not secret:
            raise ValueError("the raft transport needs a shared secret")
        self.node_id = node_id
        self._secret = secret
        self._server_ssl = server_ssl
        self._client_ssl = client_ssl
        self._on_message = on_message
        self._max_frame = max_frame
        self._connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._peers = {
            pid: _Peer(self, pid, addr, queue_limit)
            for pid, addr in peers.items()
            if pid != node_id
        }
        self._inbound: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.dropped = 0  # messages not sent (peer unreachable or queue full)
        self.rejected = 0  # frames refused (bad MAC, malformed, not for us)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0: any free port) and start connecting to the peers."""
        self._server = await asyncio.start_server(
            self._serve,
            host,
            port,
            ssl=self._server_ssl,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._server_ssl else None,
        )
        for peer in self._peers.values():
            peer.start()
        sock = self._server.sockets[0].getsockname()
        return sock[0], sock[1]

    def set_peer_address(self, peer_id: int, addr: tuple[str, int]) -> None:
        self._peers[peer_id].addr = addr

    def send(self, msg: Message) -> None:
        peer = self._peers.get(msg.dst)
        if peer is None or not peer.offer(msg):
            self.dropped += 1

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for peer in self._peers.values():
            await peer.stop()
        for writer in list(self._inbound):
            writer.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # --- framing ------------------------------------------------------------------------------

    def signer(self, challenge: bytes) -> _Signer:
        return _Signer(self._secret, challenge)

    def hello(self) -> list[bytes]:
        return [HELLO + _NODE.pack(self.node_id)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._inbound.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        peer = _peername(writer)
        try:
            challenge = os.urandom(_CHALLENGE_SIZE)
            writer.write(challenge)
            await writer.drain()
            check = self.signer(challenge)
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                hello = await self._read_frame(reader, check, HELLO_MAX, peer)
            if hello is None or bytes(hello[: len(HELLO)]) != HELLO:
                if hello is not None:
                    self.rejected += 1
                    log.warning("raft: no hello from %s, closing", peer)
                return
            while True:
                payload = await self._read_frame(reader, check, self._max_frame, peer)
                if payload is None:
                    return
                try:
                    msg = decode(payload)
                except DecodeError as exc:
                    self.rejected += 1
                    log.warning("raft: malformed message from %s: %s", peer, exc)
                    return
                if msg.dst != self.node_id:
                    self.rejected += 1
                    continue
                self._on_message(msg)
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            TimeoutError,
            ssl.SSLError,
            asyncio.CancelledError,
        ):
            pass  # the peer went away, or we are closing: either way this connection is done
        finally:
            self._inbound.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _read_frame(
        self, reader: asyncio.StreamReader, check: _Signer, limit: int, peer: object
    ) -> memoryview | None:
        """The next frame's payload once its MAC verified; None (counted) when refused."""
        head = await reader.readexactly(_LEN.size)
        (size,) = _LEN.unpack(head)
        if not _MAC_SIZE < size <= limit + _MAC_SIZE:
            self.rejected += 1
            log.warning("raft: frame of %d bytes from %s refused", size, peer)
            return None
        body = await reader.readexactly(size)
        mac, payload = body[:_MAC_SIZE], memoryview(body)[_MAC_SIZE:]
        if not hmac.compare_digest(mac, check.mac([payload])):
            self.rejected += 1
            log.warning("raft: bad MAC from %s, closing", peer)
            return None
        return payload


class _Peer:
    """The outgoing side towards one peer: a bounded queue and a task that (re)connects."""

    def __init__(self, transport: TcpTransport, peer_id: int, addr: tuple[str, int], limit: int):
        self.t = transport
        self.id = peer_id
        self.addr = addr
        self.queue: asyncio.Queue[Message] = asyncio.Queue(limit)
        self.connected = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-peer-{self.id}")

    def offer(self, msg: Message) -> bool:
        if not self.connected:
            return False  # no point queueing for a peer that is down: Raft resends
        try:
            self.queue.put_nowait(msg)
        except asyncio.QueueFull:
            return False
        return True

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def _run(self) -> None:
        backoff = 0.02
        while True:
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that arrives as the connection completes, and stop() would then hang.
                async with asyncio.timeout(self.t._connect_timeout + HANDSHAKE_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(
                        *self.addr,
                        ssl=self.t._client_ssl,
                        ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self.t._client_ssl else None,
                    )
                    try:
                        challenge = await reader.readexactly(_CHALLENGE_SIZE)
                    except BaseException:
                        writer.close()
                        raise
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
            sign = self.t.signer(challenge)
            writer.writelines(sign.frame(self.t.hello()))
            backoff = 0.02
            self.connected = True
            reader_task = asyncio.get_running_loop().create_task(_wait_eof(reader))
            try:
                while True:
                    get = asyncio.ensure_future(self.queue.get())
                    try:
                        done, _ = await asyncio.wait(
                            {get, reader_task}, return_when=asyncio.FIRST_COMPLETED
                        )
                    finally:
                        if not get.done():
                            get.cancel()
                    if get not in done:
                        break  # the peer closed the connection
                    chunks = sign.frame(encode(get.result()))
                    for _ in range(min(self.queue.qsize(), 256)):  # batch what is waiting
                        chunks += sign.frame(encode(self.queue.get_nowait()))
                    writer.writelines(chunks)
                    await writer.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                self.connected = False
                reader_task.cancel()
                writer.close()
                self._clear()

    def _clear(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()
            self.t.dropped += 1


async def _wait_eof(reader: asyncio.StreamReader) -> None:
    # Nothing is ever sent back on an outgoing connection: reading only notices its end.
    with contextlib.suppress(Exception):
        await reader.read()


def _peername(writer: asyncio.StreamWriter) -> object:
    return writer.get_extra_info("peername")
