"""TCP transport between voters: one outgoing connection per peer, length-prefixed frames.

Frame: ``u32 length | 32-byte HMAC-SHA256(secret, payload) | payload`` where ``length`` counts
the MAC and the payload, and the payload is ``messages.encode``. A frame whose MAC does not
verify closes the connection before anything is decoded, so only holders of the shared secret
can speak Raft to a voter. There is no nonce: a recorded frame can be replayed, but Raft is
built to tolerate duplicated, delayed and reordered messages (the simulator checks exactly
that), and ``dst`` is inside the MAC so a frame cannot be redirected to another voter.

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
import struct
from collections.abc import Callable, Mapping

from controller.raft.messages import DecodeError, Message, decode, encode

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
_MAC_SIZE = 32
DEFAULT_MAX_FRAME = 64 << 20  # a snapshot travels in one frame


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
    ) -> None:
        if not secret:
            raise ValueError("the raft transport needs a shared secret")
        self.node_id = node_id
        self._secret = secret
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
        self._server = await asyncio.start_server(self._serve, host, port)
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

    def frame(self, msg: Message) -> list[bytes]:
        chunks = encode(msg)
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        size = 0
        for c in chunks:
            mac.update(c)
            size += len(c)
        return [_LEN.pack(_MAC_SIZE + size), mac.digest(), *chunks]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._inbound.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                head = await reader.readexactly(_LEN.size)
                (size,) = _LEN.unpack(head)
                if not _MAC_SIZE < size <= self._max_frame + _MAC_SIZE:
                    self.rejected += 1
                    log.warning("raft: frame of %d bytes from %s refused", size, _peername(writer))
                    return
                body = await reader.readexactly(size)
                mac, payload = body[:_MAC_SIZE], memoryview(body)[_MAC_SIZE:]
                want = hmac.new(self._secret, payload, hashlib.sha256).digest()
                if not hmac.compare_digest(mac, want):
                    self.rejected += 1
                    log.warning("raft: bad MAC from %s, closing", _peername(writer))
                    return
                try:
                    msg = decode(payload)
                except DecodeError as exc:
                    self.rejected += 1
                    log.warning("raft: malformed message from %s: %s", _peername(writer), exc)
                    return
                if msg.dst != self.node_id:
                    self.rejected += 1
                    continue
                self._on_message(msg)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the peer went away, or we are closing: either way this connection is done
        finally:
            self._inbound.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()


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
                async with asyncio.timeout(self.t._connect_timeout):
                    reader, writer = await asyncio.open_connection(*self.addr)
            except (OSError, TimeoutError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
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
                    chunks = self.t.frame(get.result())
                    for _ in range(min(self.queue.qsize(), 256)):  # batch what is waiting
                        chunks += self.t.frame(self.queue.get_nowait())
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
