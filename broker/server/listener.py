"""The listener: accepts Kafka connections on one address and hands each to a
:class:`~broker.server.connection.KafkaConnection`; sweeps idle and unauthenticated
connections; tunes the process's garbage collector and gives freed heap back to the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.security.tls import HANDSHAKE_TIMEOUT_S
from broker.server.client_quotas import QuotaManager
from broker.server.connection import (
    DEFAULT_PENDING_BYTES,
    PLAINTEXT,
    KafkaConnection,
    ListenerSecurity,
)
from broker.server.connection_limits import ConnectionLimits, LimitSettings

if TYPE_CHECKING:
    from broker.server.connection import ApiTable

# Allocations (minus frees) between young-generation collections; Python's default is 700.
GC_THRESHOLD_0 = 50_000
MALLOC_TRIM_INTERVAL_S = 1.0
# How often idle and unauthenticated connections are looked for.
SWEEP_INTERVAL_S = 1.0


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim, where there is one (not on musl or macOS)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc.malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


async def _trim_periodically(trim: Callable[..., object]) -> None:
    """Give freed heap pages back to the OS once a second.

    Record data comes and goes in large buffers (requests held until their flush is
    committed, cached blocks evicted, blocks read from the store). glibc keeps freed heap
    memory for reuse and returns it only from the top of the heap, so after a burst the
    resident size stayed ~60-80 MiB above what was live (measured: 240-260 MiB idle with
    96 MiB of cache, 175-190 MiB with this). A trim takes 0.2-1.3 ms; fixing malloc's
    mmap threshold instead cost ~0.2 ms of CPU per MiB produced in page faults.
    """
    while True:
        await asyncio.sleep(MALLOC_TRIM_INTERVAL_S)
        trim(0)


class KafkaServer:
    def __init__(
        self,
        apis: ApiTable,
        host: str,
        port: int,
        max_frame: int,
        pending_bytes: int = DEFAULT_PENDING_BYTES,
        security: ListenerSecurity = PLAINTEXT,
        tune_process: bool = True,
        request_quota: QuotaManager | None = None,
        limits: ConnectionLimits | None = None,
        exempt: bool = False,
    ) -> None:
        self._apis = apis
        self._security = security
        self._limits = limits or ConnectionLimits(LimitSettings())
        self._exempt = exempt
        self._sweeper: asyncio.Task[None] | None = None
        self._tune_process = tune_process
        self._request_quota = request_quota
        self._host = host
        self._port = port
        self._max_frame = max_frame
        self._pending_bytes = pending_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[KafkaConnection] = set()
        self._trimmer: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self, serving: bool = True) -> None:
        """Bind (the port is known from here on); accept connections now, or from
        :meth:`serve` on."""
        # The cyclic garbage collector was ~13 % of a small-batch producer's CPU (perf):
        # the request path allocates tens of thousands of objects per second, so
        # collections ran hundreds of times a second, and the older generations held
        # everything loaded at start (modules, kio schemas, botocore's service model).
        # Frozen, that start-up state is never scanned again; a larger first threshold
        # lets most request objects die by reference counting before any collection.
        # Once per process: with several listeners only the first server does it.
        if self._tune_process:
            gc.freeze()
            gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])
            trim = _malloc_trim()
            if trim is not None:
                self._trimmer = asyncio.create_task(_trim_periodically(trim))
        loop = asyncio.get_running_loop()
        tls = self._security.ssl_context
        self._server = await loop.create_server(
            lambda: KafkaConnection(
                self._apis,
                self._max_frame,
                self._connections,
                self._pending_bytes,
                security=self._security,
                request_quota=self._request_quota,
                limits=self._limits,
                exempt=self._exempt,
            ),
            self._host or None,  # empty: every interface, as Kafka's PLAINTEXT://:9092
            self._port,
            reuse_address=True,
            backlog=1024,
            ssl=tls,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls is not None else None,
            start_serving=serving,
        )
        self._sweeper = asyncio.create_task(self._sweep())

    async def serve(self) -> None:
        """Accept connections (after ``start(serving=False)``; until then connecting is
        refused)."""
        assert self._server is not None
        await self._server.start_serving()

    async def _sweep(self) -> None:
        """Once a second: idle and unauthenticated connections past their limits."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = time.monotonic() * 1000
            for connection in list(self._connections):
                connection.expired(now)

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
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._trimmer is not None:
            self._trimmer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._trimmer
            self._trimmer = None
