"""Quick suspicion of peers for diskless routing (broker/metadata/peer_probe.py): a peer that
refuses connections or stops answering is suspected after diskless.peer.suspect.ms, never
before, and not any more once it answers again; peers come and go with the live list."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.metadata.peer_probe import PeerProbe


class Peer:
    """A fake inter-broker connection: answers, refuses, or hangs (a paused process)."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.requests = 0
        self.closed = False

    async def request(self, request: Any, timeout: float) -> Any:
        self.requests += 1
        if self.mode == "refuse":
            raise ConnectionRefusedError("refused")
        if self.mode == "hang":
            await asyncio.sleep(timeout)
            raise TimeoutError
        return "versions"

    def close(self) -> None:
        self.closed = True


async def test_a_dead_or_paused_peer_is_suspected_after_the_suspect_time_only() -> None:
    peers: dict[int, Peer] = {}

    def connect(node: int, host: str, port: int) -> Peer:
        peers[node] = Peer()
        return peers[node]

    probe = PeerProbe(1, connect, "ApiVersions", interval_ms=20, suspect_ms=200)
    live = [(1, "h", 1), (2, "h", 2), (3, "h", 3)]
    probe.start(lambda: live)
    try:
        await asyncio.sleep(0.1)
        assert set(peers) == {2, 3} and probe.suspects() == frozenset()
        assert peers[2].requests >= 2  # probed every interval

        peers[2].mode = "refuse"  # killed: connections refused at once
        peers[3].mode = "hang"  # paused: no answer
        await asyncio.sleep(0.1)
        assert probe.suspects() == frozenset()  # not before the suspect time
        await asyncio.sleep(0.3)
        assert probe.suspects() == {2, 3}

        peers[2].mode = peers[3].mode = "answer"
        await asyncio.sleep(0.3)
        assert probe.suspects() == frozenset()

        # A peer fenced by the controller (gone from the live list) is no longer probed.
        gone = peers[3]
        live.remove((3, "h", 3))
        await asyncio.sleep(0.1)
        assert gone.closed
        before = gone.requests
        await asyncio.sleep(0.1)
        assert gone.requests == before
    finally:
        probe.close()
    assert peers[2].closed


async def test_probing_off_suspects_nobody() -> None:
    probe = PeerProbe(1, lambda *_: Peer(), "ApiVersions", interval_ms=0, suspect_ms=0)
    probe.start(lambda: [(2, "h", 2)])
    await asyncio.sleep(0.05)
    assert not probe.enabled and probe.suspects() == frozenset()
    probe.close()


def test_metadata_names_as_controller_the_lowest_broker_its_peers_still_hear() -> None:
    """Admin clients send controller-bound requests (CreateTopics, IncrementalAlterConfigs,
    DescribeConfigs with librdkafka) to Metadata's controller id and wait for that broker:
    one that stopped answering is passed over before the controller fences it."""
    from types import SimpleNamespace

    from broker.node import Broker

    suspects: frozenset[int] = frozenset()
    node = SimpleNamespace(
        endpoints=lambda: [SimpleNamespace(node_id=n) for n in (3, 1, 2)],
        peer_probe=SimpleNamespace(suspects=lambda: suspects),
        config=SimpleNamespace(node_id=2),
    )
    controller_id = Broker.controller_id.fget  # type: ignore[attr-defined]
    assert controller_id(node) == 1
    suspects = frozenset({1})
    assert controller_id(node) == 2
    suspects = frozenset({1, 2, 3})  # this broker cut off: the live list stands
    assert controller_id(node) == 1
    node.peer_probe = None
    assert controller_id(node) == 1
