"""Three real Raft nodes over loopback TCP with disk storage (short timeouts)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller.raft import (
    EntryKind,
    NodeConfig,
    NotLeader,
    RaftNode,
    Snapshot,
)
from controller.raft.messages import Entry, VoteRequest
from controller.raft.transport import TcpTransport
from sluice.launch.process import free_port

SECRET = b"test-secret"


class ListMachine:
    """A state machine that keeps the applied payloads."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.noops = 0

    def apply(self, entry: Entry) -> None:
        if entry.kind == EntryKind.DATA:
            self.items.append(entry.data)
        else:
            self.noops += 1

    def snapshot(self) -> bytes:
        return b"\n".join(self.items)

    def restore(self, snapshot: Snapshot) -> None:
        self.items = snapshot.data.split(b"\n") if snapshot.data else []


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


def make_nodes(tmp_path: Path, **overrides: object) -> list[tuple[RaftNode, ListMachine]]:
    ports = free_ports(3)
    voters = {i + 1: ("127.0.0.1", ports[i]) for i in range(3)}
    out = []
    for nid in voters:
        cfg = NodeConfig(
            node_id=nid,
            voters=voters,
            data_dir=tmp_path / f"n{nid}",
            secret=SECRET,
            tick_interval=0.01,
            election_ticks=10,
            heartbeat_ticks=2,
            **overrides,  # type: ignore[arg-type]
        )
        sm = ListMachine()
        out.append((RaftNode(cfg, sm), sm))
    return out


async def wait_for_leader(nodes: list[RaftNode], timeout: float = 5.0) -> RaftNode:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        leaders = [n for n in nodes if n.is_leader]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no leader: {[n.status() for n in nodes]}")


async def eventually(check, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


async def propose_to_leader(nodes: list[RaftNode], data: bytes) -> int:
    """``data`` proposed as a client of the quorum does: to the leader, and again to the
    new one when the node asked is no longer leader (NotLeader is raised before anything is
    appended, so nothing is proposed twice). The timeouts here are 100 ms: on a loaded
    machine (load 20) the event loop can stall longer than that and a follower start an
    election in the middle of the test's proposals."""
    while True:
        leader = await wait_for_leader(nodes)
        try:
            return await leader.propose(data, timeout=5)
        except NotLeader:
            await asyncio.sleep(0.01)


async def test_three_nodes_elect_replicate_and_survive_a_leader_loss(tmp_path: Path) -> None:
    pairs = make_nodes(tmp_path, snapshot_every=20, retain_entries=5)
    nodes = [n for n, _ in pairs]
    for n in nodes:
        await n.start()
    try:
        leader = await wait_for_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        await eventually(lambda: follower.leader_id == leader.node_id)  # its first heartbeat
        with pytest.raises(NotLeader) as exc:
            await follower.propose(b"nope")
        assert exc.value.leader == leader.node_id
        indexes = [await propose_to_leader(nodes, b"v%d" % i) for i in range(30)]
        assert indexes == sorted(indexes)
        leader = await wait_for_leader(nodes)
        await leader.read_index(timeout=5)
        for _, sm in pairs:
            await eventually(lambda sm=sm: len(sm.items) == 30)
            assert sm.items == [b"v%d" % i for i in range(30)]
        assert leader.status()["snapshot_index"] > 0  # 30 entries > snapshot_every

        # The leader goes away (as after SIGKILL: no goodbye); the others elect a new one.
        loop = asyncio.get_running_loop()
        started = loop.time()
        await leader.stop()
        rest = [n for n in nodes if n is not leader]
        new_leader = await wait_for_leader(rest)
        elapsed = loop.time() - started
        assert elapsed < 20 * 10 * 0.01  # well within 2 election timeouts plus slack
        await new_leader.propose(b"after", timeout=5)
        await new_leader.read_index(timeout=5)
        with pytest.raises(NotLeader):
            await next(n for n in rest if n is not new_leader).read_index(timeout=5)

        # The old leader restarts from its directory and catches up.
        old_id = leader.node_id
        cfg = leader.config
        sm = ListMachine()
        again = RaftNode(cfg, sm)
        await again.start()
        nodes = [*rest, again]
        await eventually(lambda: sm.items[-1:] == [b"after"])
        assert sm.items == [b"v%d" % i for i in range(30)] + [b"after"]
        assert again.node_id == old_id and not again.is_leader
    finally:
        for n in nodes:
            await n.stop()


async def test_single_voter_node(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    cfg = NodeConfig(
        node_id=1,
        voters={1: ("127.0.0.1", port)},
        data_dir=tmp_path,
        secret=SECRET,
        tick_interval=0.01,
    )
    sm = ListMachine()
    node = RaftNode(cfg, sm)
    await node.start()
    try:
        assert await node.propose(b"a", timeout=2) == 2  # after the leader's NOOP
        assert await node.read_index(timeout=2) == 2
    finally:
        await node.stop()
    sm2 = ListMachine()
    node = RaftNode(cfg, sm2)
    await node.start()
    try:
        await node.wait_applied(2, timeout=2)
        assert sm2.items == [b"a"]
        assert await node.propose(b"b", timeout=2) == 4  # a new term, a new NOOP
    finally:
        await node.stop()


async def test_transport_drops_frames_with_a_wrong_secret() -> None:
    got: list[object] = []
    server = TcpTransport(1, {}, secret=SECRET, on_message=got.append)
    host, port = await server.start("127.0.0.1", 0)
    good = TcpTransport(2, {1: (host, port)}, secret=SECRET, on_message=got.append)
    bad = TcpTransport(3, {1: (host, port)}, secret=b"wrong", on_message=got.append)
    await good.start("127.0.0.1", 0)
    await bad.start("127.0.0.1", 0)
    try:
        msg = VoteRequest(5, 2, 1, 0, 0, True)
        await eventually(lambda: good._peers[1].connected and bad._peers[1].connected)
        bad.send(VoteRequest(5, 3, 1, 0, 0, True))
        good.send(msg)
        # The bad peer's hello is refused at each of its (re)connections.
        await eventually(lambda: got == [msg] and server.rejected >= 1)
    finally:
        for t in (server, good, bad):
            await t.close()


class _Recorder:
    """A man in the middle: forwards a voter's connection and keeps what it sent."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = bytearray()
        self.challenge = b""
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.challenge = await up_reader.readexactly(16)
        writer.write(self.challenge)

        async def pump() -> None:
            while data := await reader.read(65536):
                self.sent += data
                up_writer.write(data)

        try:
            await pump()
        finally:
            up_writer.close()
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_a_recorded_raft_conversation_replayed_is_refused() -> None:
    """Frames recorded between two voters (the secret unknown to the attacker) and sent
    again on a new connection meet a new challenge: refused, nothing delivered."""
    got: list[object] = []
    server = TcpTransport(1, {}, secret=SECRET, on_message=got.append)
    host, port = await server.start("127.0.0.1", 0)
    recorder = _Recorder((host, port))
    relay = await recorder.start()
    sender = TcpTransport(2, {1: relay}, secret=SECRET, on_message=lambda _m: None)
    await sender.start("127.0.0.1", 0)
    try:
        msg = VoteRequest(5, 2, 1, 0, 0, True)
        await eventually(lambda: sender._peers[1].connected)
        sender.send(msg)
        await eventually(lambda: got == [msg])
        recorded = bytes(recorder.sent)
        assert len(recorded) > 40
        # Replayed whole on a fresh connection: the hello's MAC no longer verifies.
        reader, writer = await asyncio.open_connection(host, port)
        await reader.readexactly(16)
        rejected = server.rejected
        writer.write(recorded)
        await writer.drain()
        assert await reader.read() == b""  # closed by the voter
        writer.close()
        assert server.rejected == rejected + 1 and got == [msg]
    finally:
        await sender.close()
        await recorder.close()
        await server.close()


async def test_an_unauthenticated_peer_cannot_make_a_voter_buffer_a_big_frame() -> None:
    """Before the hello verifies a voter reads no frame larger than a hello: a stranger
    announcing 64 MiB is cut off after the 4-byte length, before any of it is buffered."""
    got: list[object] = []
    server = TcpTransport(1, {}, secret=SECRET, on_message=got.append)
    host, port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        await reader.readexactly(16)
        writer.write((32 + (64 << 20) - 1).to_bytes(4, "big") + b"x" * 1024)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert server.rejected == 1 and got == []
    finally:
        await server.close()


async def test_default_timeouts_replace_a_lost_leader_within_two_seconds(tmp_path: Path) -> None:
    """The requirement on the defaults (50 ms tick, 0.5-1 s election timeout): a new leader
    within 2 s of the old one vanishing, twice in a row."""
    ports = free_ports(3)
    voters = {i + 1: ("127.0.0.1", ports[i]) for i in range(3)}
    configs = {
        nid: NodeConfig(node_id=nid, voters=voters, data_dir=tmp_path / f"n{nid}", secret=SECRET)
        for nid in voters
    }
    nodes = {nid: RaftNode(cfg, ListMachine()) for nid, cfg in configs.items()}
    for n in nodes.values():
        await n.start()
    loop = asyncio.get_running_loop()
    try:
        for _ in range(2):
            leader = await wait_for_leader(list(nodes.values()))
            await leader.propose(b"x", timeout=5)
            await asyncio.sleep(0.3)  # steady state: heartbeats flowing
            started = loop.time()
            await leader.stop()
            rest = [n for n in nodes.values() if n is not leader]
            new_leader = await wait_for_leader(rest, timeout=5)
            assert loop.time() - started < 2.0
            await new_leader.propose(b"y", timeout=5)
            nodes[leader.node_id] = RaftNode(configs[leader.node_id], ListMachine())
            await nodes[leader.node_id].start()
    finally:
        for n in nodes.values():
            await n.stop()


async def test_the_leaders_status_shows_what_each_follower_has(tmp_path: Path) -> None:
    # DescribeQuorum (broker/metadata/describe_quorum.py) reports the voters' log end
    # offsets from this: the leader's view of its followers, as Kafka's Raft leader does.
    pairs = make_nodes(tmp_path)
    nodes = [n for n, _ in pairs]
    for n in nodes:
        await n.start()
    try:
        leader = await wait_for_leader(nodes)
        for i in range(5):
            await leader.propose(b"v%d" % i, timeout=5)
        last = leader.status()["last_index"]
        followers = {str(n.node_id) for n in nodes if n is not leader}

        def caught_up() -> bool:
            matches = leader.status()["follower_match"]
            assert isinstance(matches, dict)
            return set(matches) == followers and all(m == last for m in matches.values())

        await eventually(caught_up)
        assert leader.status()["voters"] == [1, 2, 3]
        follower = next(n for n in nodes if n is not leader)
        assert follower.status()["follower_match"] == {}  # only a leader knows
    finally:
        for n in nodes:
            await n.stop()
