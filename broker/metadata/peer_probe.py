"""Quick suspicion of dead or stuck peers, for diskless routing only.

The controller fences a broker once its session times out (``broker.session.timeout.ms``,
9 s by default). Until then the metadata transformer would keep routing clients to a broker
that died, so its diskless partitions would be unavailable for the whole session. Seed 001
wants routing around an offline broker to be immediate. Any broker can serve any diskless
partition, so routing around a broker costs nothing but AZ locality: this module lets each
broker suspect a peer much sooner, from its own probes, and the transformer treats a
suspect as offline.

Each broker asks each live peer for ApiVersions over the inter-broker listener every
``diskless.peer.probe.interval.ms`` (250 ms), with that listener's TLS/SASL, waiting at
most ``diskless.peer.suspect.ms`` (1000 ms). A peer is suspected while its probes fail and
the last answer is older than ``diskless.peer.suspect.ms``: a killed broker refuses
connections at once, a paused (SIGSTOPped) one stops answering. A suspicion ends with the
next answer.

Suspicion is local and never fences: the peer keeps its registration, leader epochs, ISR
and classic leaderships (those still follow the controller's session timeout, as in Kafka);
only which broker a client is sent to for a diskless partition changes, and only on the
brokers that suspect it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class ProbeConnection(Protocol):
    """What a probe needs of an inter-broker connection (broker.logs.classic.kafka_client)."""

    async def request(self, request: Any, timeout: float) -> Any: ...

    def close(self) -> None: ...


class _Peer:
    __slots__ = ("address", "connection", "failing", "last_ok", "suspected", "task")

    def __init__(self, address: tuple[str, int], connection: ProbeConnection, now: float) -> None:
        self.address = address
        self.connection = connection
        # A new peer is given the benefit of the doubt until its probes fail.
        self.last_ok = now
        self.failing = False
        self.suspected = False
        self.task: asyncio.Task[None] | None = None


class PeerProbe:
    def __init__(
        self,
        me: int,
        connect: Callable[[int, str, int], ProbeConnection],
        request: Any,
        interval_ms: int,
        suspect_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``connect(node_id, host, port)`` opens an inter-broker connection; ``request``
        is the probe (an ApiVersions request); ``interval_ms`` 0 turns probing off."""
        self._me = me
        self._connect = connect
        self._request = request
        self._interval = interval_ms / 1000
        self._suspect_after = suspect_ms / 1000
        self._clock = clock
        self._peers: dict[int, _Peer] = {}
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self._interval > 0

    def suspects(self) -> frozenset[int]:
        """The peers routed around now."""
        now = self._clock()
        return frozenset(node for node, p in self._peers.items() if self._is_suspected(p, now))

    def _is_suspected(self, peer: _Peer, now: float) -> bool:
        return peer.failing and now - peer.last_ok >= self._suspect_after

    def watch(self, peers: Iterable[tuple[int, str, int]]) -> None:
        """The live peers (node id, host, port of the inter-broker listener) as the
        controller lists them: probe new ones, stop probing those gone."""
        if not self.enabled:
            return
        wanted = {node: (host, port) for node, host, port in peers if node != self._me}
        for node in [n for n in self._peers if wanted.get(n) != self._peers[n].address]:
            self._forget(node)
        for node, (host, port) in wanted.items():
            if node not in self._peers:
                peer = _Peer((host, port), self._connect(node, host, port), self._clock())
                peer.task = asyncio.create_task(self._probe(node, peer))
                self._peers[node] = peer

    def _forget(self, node: int) -> None:
        peer = self._peers.pop(node)
        if peer.task is not None:
            peer.task.cancel()
        peer.connection.close()

    async def _probe(self, node: int, peer: _Peer) -> None:
        while True:
            started = self._clock()
            try:
                await peer.connection.request(self._request, self._suspect_after)
            except Exception as exc:  # any failure to answer: a lost connection, a timeout
                peer.failing = True
                if not peer.suspected and self._is_suspected(peer, self._clock()):
                    peer.suspected = True
                    log.warning(
                        "broker %d at %s:%d has not answered for %.1f s (%s): routing "
                        "diskless clients around it",
                        node,
                        *peer.address,
                        self._clock() - peer.last_ok,
                        exc,
                    )
            else:
                peer.failing = False
                peer.last_ok = self._clock()
                if peer.suspected:
                    peer.suspected = False
                    log.info("broker %d answers again: routing diskless clients to it", node)
            await asyncio.sleep(max(0.0, self._interval - (self._clock() - started)))

    def start(self, peers: Callable[[], Iterable[tuple[int, str, int]]]) -> None:
        """Probe ``peers()`` (re-read every interval: brokers come and go)."""
        if self.enabled and self._supervisor is None:
            self._supervisor = asyncio.create_task(self._follow(peers))

    async def _follow(self, peers: Callable[[], Iterable[tuple[int, str, int]]]) -> None:
        while True:
            try:
                self.watch(peers())
            except Exception:
                log.exception("listing the peers to probe failed")
            await asyncio.sleep(self._interval)

    def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            self._supervisor = None
        for node in list(self._peers):
            self._forget(node)
