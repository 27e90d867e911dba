"""The broker side of controller mode, against a fake controller.

The fake serves the HTTP API of controller/wire.py over a real ``ControllerLogic`` and an
in-memory ``MetadataImage`` (no Raft: every proposal commits at once, as index+1), so these
tests exercise the broker's client, metadata follower, membership, catalog and Kafka
handlers exactly as a real quorum would be spoken to.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import warnings
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.metadata.controller_catalog import ControllerCatalog
from broker.metadata.controller_client import ControllerClient
from broker.metadata.membership import BrokerEndpoint, ControllerMembership
from broker.metadata.metadata_follower import MetadataFollower
from broker.node import Broker
from broker.server.api_table import VERSIONS, build_api_table
from common import topic_config_validation
from controller.broker_config_admin import BrokerConfigAlteration, alter_broker_configs
from controller.image import MetadataImage
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.records import Record, encode_batch
from controller.requests import (
    AlterTopicConfigs,
    BrokerRegistrationRequest,
    ConfigOp,
    DisableRemoteAck,
    DisableRemoteTopic,
    NewPartitions,
    NewTopic,
    OpType,
    Reassignment,
)
from controller.wire import from_json, to_json
from storage.backends import coordinator_and_catalog, object_store
from storage.partition_key import PartitionKey
from tests.unit._handlers import decode_answer, request_and_context, settled

E = ErrorCode
SECRET = "s3cr3t"


# --------------------------------------------------------------------------- the fake


class FakeController:
    """One always-active controller: proposals commit at once."""

    def __init__(self, session_timeout_ms: int = 1000, classic_topics: bool = False) -> None:
        self.logic = ControllerLogic(
            ControllerConfig(
                session_timeout_ms=session_timeout_ms,
                validate_configs=topic_config_validation.validate,
                classic_topics=classic_topics,
            )
        )
        self.image = MetadataImage()
        self.applied = 0
        self.entries: list[tuple[int, bytes]] = []
        self.horizon = 0  # followers asking for older indexes get a snapshot
        self.metadata_delay = 0.0  # makes followers lag (read-your-writes tests)
        self.paths: list[str] = []
        self.keep: set[int] = set()  # brokers ``keep_alive`` heartbeats for
        self.acks: list[DisableRemoteAck] = []  # KIP-950 answers heartbeats carried
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.port = 0

    @staticmethod
    def now_ms() -> int:
        return int(time.monotonic() * 1000)

    def commit(self, records: list[Record]) -> int:
        if records:
            self.image.apply_batch(records)
            self.applied += 1
            self.entries.append((self.applied, encode_batch(records)))
            self._changed.set()
            self._changed = asyncio.Event()
        return self.applied

    def compact(self) -> None:
        self.horizon = self.applied
        self.entries.clear()

    chunk = 1000

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/v1/metadata", self._metadata)
        app.router.add_post("/v1/brokers/register", self._register)
        app.router.add_post("/v1/brokers/heartbeat", self._heartbeat)
        app.router.add_post("/v1/brokers/unregister", self._unregister)
        app.router.add_post("/v1/topics/create", self._create)
        app.router.add_post("/v1/topics/delete", self._delete)
        app.router.add_post("/v1/topics/partitions", self._partitions)
        app.router.add_post("/v1/topics/configs", self._configs)
        app.router.add_post("/v1/reassignments", self._reassign)
        app.router.add_post("/v1/broker-configs/alter", self._broker_configs)
        app.router.add_get("/v1/reassignments", self._list_reassignments)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.logic.become_active(self.image, self.now_ms())
        self._ticker = asyncio.create_task(self._tick())

    async def close(self) -> None:
        self._changed.set()  # ends the long polls in flight: cleanup waits for them
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self.commit(self.logic.tick(self.image, self.now_ms()))

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.paths.append(request.path)
        if request.headers.get("X-Sluice-Secret") != SECRET:
            return web.json_response({"error": "forbidden"}, status=403)
        return await handler(request)

    def _answer(self, outcome: Any, wrap: bool = False) -> web.Response:
        applied = self.commit(outcome.records)
        body = {"results": to_json(outcome.response)} if wrap else to_json(outcome.response)
        body["applied"] = applied
        return web.json_response(body)

    async def _metadata(self, request: web.Request) -> web.Response:
        after = int(request.query["after"])
        wait_ms = int(request.query.get("wait_ms", "0"))
        if self.applied <= after and wait_ms:
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), wait_ms / 1000)
        if self.metadata_delay:
            await asyncio.sleep(self.metadata_delay)
        body: dict[str, Any] = {"applied": self.applied, "leader": 1, "snapshot": None}
        if after < self.horizon:
            body["snapshot"] = to_json(encode_batch(self.image.snapshot()))
            body["snapshot_index"] = self.applied
            body["entries"] = []
        else:
            # At most ``chunk`` entries per answer, as controller/state.py's read (1000).
            body["entries"] = [
                {"index": i, "data": to_json(d)} for i, d in self.entries if i > after
            ][: self.chunk]
        return web.json_response(body)

    async def _register(self, request: web.Request) -> web.Response:
        req = from_json(BrokerRegistrationRequest, await request.json())
        return self._answer(self.logic.register_broker(self.image, req, self.now_ms()))

    async def _heartbeat(self, request: web.Request) -> web.Response:
        b = await request.json()
        outcome = self.logic.broker_heartbeat(
            self.image,
            b["node_id"],
            b["broker_epoch"],
            self.now_ms(),
            want_fence=b.get("want_fence", False),
            want_shutdown=b.get("want_shutdown", False),
        )
        acks = [from_json(DisableRemoteAck, a) for a in b.get("disabled_remote", ())]
        self.acks += acks
        return self._answer(self.logic.with_disables(self.image, b["node_id"], outcome, acks))

    async def _unregister(self, request: web.Request) -> web.Response:
        b = await request.json()
        return self._answer(self.logic.unregister_broker(self.image, b["node_id"]))

    async def _create(self, request: web.Request) -> web.Response:
        b = await request.json()
        topics = [from_json(NewTopic, t) for t in b["topics"]]
        outcome = self.logic.create_topics(self.image, topics, b.get("validate_only", False))
        return self._answer(outcome, wrap=True)

    async def _delete(self, request: web.Request) -> web.Response:
        b = await request.json()
        keys: list[str | uuid.UUID] = []
        for key in b["topics"]:
            try:
                keys.append(uuid.UUID(key))
            except ValueError:
                keys.append(key)
        return self._answer(self.logic.delete_topics(self.image, keys), wrap=True)

    async def _partitions(self, request: web.Request) -> web.Response:
        b = await request.json()
        topics = [from_json(NewPartitions, t) for t in b["topics"]]
        outcome = self.logic.create_partitions(self.image, topics, b.get("validate_only", False))
        return self._answer(outcome, wrap=True)

    async def _configs(self, request: web.Request) -> web.Response:
        b = await request.json()
        topics = [from_json(AlterTopicConfigs, t) for t in b["topics"]]
        outcome = self.logic.alter_configs(self.image, topics, b.get("validate_only", False))
        return self._answer(outcome, wrap=True)

    async def _reassign(self, request: web.Request) -> web.Response:
        b = await request.json()
        items = [from_json(Reassignment, r) for r in b["reassignments"]]
        return self._answer(self.logic.alter_partition_reassignments(self.image, items), True)

    async def _broker_configs(self, request: web.Request) -> web.Response:
        b = await request.json()
        items = [from_json(BrokerConfigAlteration, e) for e in b["entries"]]
        outcome = alter_broker_configs(self.image, items, b.get("validate_only", False))
        return self._answer(outcome, wrap=True)

    async def _list_reassignments(self, request: web.Request) -> web.Response:
        ongoing = self.logic.list_partition_reassignments(self.image)
        return web.json_response({"results": to_json(ongoing)})

    # --- brokers the tests run by hand ---------------------------------------------------

    def add_broker(self, node_id: int, rack: str | None) -> int:
        """Registers and unfences a broker that no process backs (it will be fenced after
        the session timeout unless ``keep_alive`` beats for it)."""
        req = BrokerRegistrationRequest(node_id, uuid.uuid4(), "10.0.0.1", 9000 + node_id, rack)
        outcome = self.logic.register_broker(self.image, req, self.now_ms())
        self.commit(outcome.records)
        epoch = outcome.response.broker_epoch
        self.beat(node_id)
        return epoch

    def beat(self, node_id: int, **kwargs: Any) -> None:
        broker = self.image.brokers[node_id]
        outcome = self.logic.broker_heartbeat(
            self.image, node_id, broker.broker_epoch, self.now_ms(), **kwargs
        )
        self.commit(outcome.records)


class NotLeader:
    """A controller that is not the active one: 421 with a hint for writes, 503 for reads."""

    def __init__(self, leader_url: str) -> None:
        self.leader_url = leader_url
        self.hits = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _any(self, request: web.Request) -> web.Response:
        self.hits += 1
        if request.method == "GET":
            return web.json_response({"error": "starting"}, status=503)
        return web.json_response({"leader": 1, "leader_url": self.leader_url}, status=421)


@pytest.fixture
async def fake() -> AsyncIterator[FakeController]:
    controller = FakeController()
    await controller.start()
    try:
        yield controller
    finally:
        await controller.close()


async def eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            assert check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- client


async def test_client_follows_the_leader_hint(fake: FakeController) -> None:
    other = NotLeader(f"http://{fake.address}")
    await other.start()
    client = ControllerClient([f"127.0.0.1:{other.port}", fake.address], SECRET)
    try:
        request = BrokerRegistrationRequest(7, uuid.uuid4(), "h", 1, "az-a")
        result, applied = await client.register(request)
        assert result.error_code == E.none and applied == fake.applied
        assert client.leader_url == f"http://{fake.address}"
        hits = other.hits
        await client.heartbeat(7, result.broker_epoch)
        assert other.hits == hits  # the known leader is asked first
        # Reads go to any controller: the one answering 503 is skipped.
        chunk = await client.metadata(0, 0)
        assert chunk.applied == fake.applied and chunk.entries
    finally:
        await client.close()
        await other.close()


async def test_client_gives_up_with_a_retriable_error() -> None:
    client = ControllerClient(["127.0.0.1:1"], request_timeout=0.2, deadline=0.5)
    try:
        from broker.metadata.controller_client import ControllerUnavailable

        with pytest.raises(ControllerUnavailable) as info:
            await client.heartbeat(1, 1)
        assert info.value.code == E.request_timed_out
    finally:
        await client.close()


# --------------------------------------------------------------------------- follower


class Recorder:
    def __init__(self) -> None:
        self.logs: list[PartitionKey] = []
        self.removed: list[uuid.UUID] = []
        self.changes = 0
        self.fail_logs = 0

    async def logs_needed(self, keys: list[PartitionKey]) -> None:
        if self.fail_logs:
            self.fail_logs -= 1
            raise OSError("coordinator down")
        self.logs += keys

    async def topics_removed(self, topic_ids: list[uuid.UUID]) -> None:
        self.removed += topic_ids

    async def image_changed(self) -> None:
        self.changes += 1


async def test_a_starting_follower_reads_the_whole_log_not_its_first_answer(
    fake: FakeController,
) -> None:
    """The nemesis found restarted brokers acting on a past state of the cluster: start
    returned after the first answer (at most 1000 entries), so the replica manager opened
    partitions as leader at an old epoch and rewrote their epoch history. Start now returns
    only once the image holds everything the controller has."""
    fake.chunk = 2
    fake.add_broker(1, "az-a")
    for i in range(5):
        fake.commit(fake.logic.create_topics(fake.image, [NewTopic(f"t{i}", 1)]).records)
    client = ControllerClient([fake.address], SECRET)
    follower = MetadataFollower(client, wait_ms=200)
    try:
        await follower.start(Recorder())
        assert follower.applied == fake.applied and follower.image == fake.image
    finally:
        await follower.stop()
        await client.close()


async def test_follower_applies_entries_and_snapshots(fake: FakeController) -> None:
    fake.add_broker(1, "az-a")
    fake.commit(fake.logic.create_topics(fake.image, [NewTopic("early", 2)]).records)
    fake.compact()  # a new follower must start from a snapshot
    client = ControllerClient([fake.address], SECRET)
    follower = MetadataFollower(client, wait_ms=200)
    recorder = Recorder()
    try:
        await follower.start(recorder)
        assert follower.image == fake.image and follower.applied == fake.applied
        early = fake.image.topic("early")
        assert early is not None
        assert sorted(k.partition for k in recorder.logs) == [0, 1]
        # Then entries, by long poll; the first log creation fails and is retried.
        recorder.fail_logs = 1
        fake.commit(fake.logic.create_topics(fake.image, [NewTopic("late", 1)]).records)
        fake.commit(fake.logic.create_partitions(fake.image, [NewPartitions("early", 3)]).records)
        await eventually(lambda: follower.applied == fake.applied)
        assert follower.image == fake.image
        late = fake.image.topic("late")
        assert late is not None
        await eventually(
            lambda: (
                {(k.topic_id, k.partition) for k in recorder.logs}
                == {
                    (early.topic_id, 0),
                    (early.topic_id, 1),
                    (early.topic_id, 2),
                    (late.topic_id, 0),
                }
            )
        )
        fake.commit(fake.logic.delete_topics(fake.image, ["late"]).records)
        assert await follower.wait_for(fake.applied, 5)
        assert recorder.removed == [late.topic_id]
        # A follower that fell behind the retained entries gets a snapshot again.
        await follower.stop()
        fake.commit(fake.logic.delete_topics(fake.image, ["early"]).records)
        fake.commit(fake.logic.create_topics(fake.image, [NewTopic("again", 1)]).records)
        fake.compact()
        await follower.poll_once(0)
        assert follower.image == fake.image
        assert early.topic_id in recorder.removed
    finally:
        await follower.stop()
        await client.close()


# --------------------------------------------------------------------------- membership


async def start_member(
    fake: FakeController, node_id: int, rack: str, session_ms: int = 1000
) -> tuple[ControllerMembership, MetadataFollower, ControllerClient]:
    client = ControllerClient([fake.address], SECRET)
    follower = MetadataFollower(client, wait_ms=200)
    await follower.start()
    me = BrokerEndpoint(node_id, "127.0.0.1", 9000 + node_id, rack)
    member = ControllerMembership(client, follower, me, 100, session_ms)
    await member.start()
    return member, follower, client


async def test_registration_heartbeats_fencing_and_live_brokers(fake: FakeController) -> None:
    m1, f1, c1 = await start_member(fake, 1, "az-a")
    m2, f2, c2 = await start_member(fake, 2, "az-b")
    try:
        await eventually(lambda: [b.node_id for b in m1.live()] == [1, 2])
        await eventually(lambda: [b.node_id for b in m2.live()] == [1, 2])
        assert m1.problem() is None and not m1.fenced
        assert m1.live()[1] == BrokerEndpoint(2, "127.0.0.1", 9002, "az-b")
        # Broker 2 stops heartbeating (a crash): fenced after the session timeout.
        assert m2._task is not None
        m2._task.cancel()
        await eventually(lambda: [b.node_id for b in m1.live()] == [1], timeout=5)
        assert fake.image.brokers[2].fenced
        # It comes back: unfenced by its next heartbeat.
        m2._task = asyncio.create_task(m2._loop())
        await eventually(lambda: [b.node_id for b in m1.live()] == [1, 2], timeout=5)
        # A clean stop fences at once.
        await m2.stop()
        await eventually(lambda: [b.node_id for b in m1.live()] == [1])
    finally:
        for member, follower, client in ((m1, f1, c1), (m2, f2, c2)):
            await member.stop()
            await follower.stop()
            await client.close()


async def test_a_broker_waits_to_be_unfenced_before_it_serves(fake: FakeController) -> None:
    """As Kafka's broker, a Sluice broker opens its listeners only once the controller
    unfenced it (Broker.start awaits wait_unfenced): one serving while fenced accepted
    CreateTopics that the controller then could not place on it. Here its metadata lags
    past its registration, so it asks to stay fenced until it has caught up."""
    fake.metadata_delay = 1.5
    member, follower, client = await start_member(fake, 4, "az-a")
    try:
        waiting = asyncio.create_task(member.wait_unfenced())
        await asyncio.sleep(0.3)
        assert member.fenced and not waiting.done()
        fake.metadata_delay = 0.0
        await asyncio.wait_for(waiting, 10)
        assert not member.fenced
    finally:
        await member.stop()
        await follower.stop()
        await client.close()


async def test_a_restarted_broker_waits_for_the_old_session(fake: FakeController) -> None:
    old, f1, c1 = await start_member(fake, 3, "az-a")
    assert old._task is not None
    old._task.cancel()  # crashed: no controlled shutdown
    new, f2, c2 = await start_member(fake, 3, "az-a")
    try:
        assert new.broker_epoch > old.broker_epoch
        assert new.incarnation_id != old.incarnation_id
        await eventually(lambda: not new.fenced and new.problem() is None)
    finally:
        await new.stop()
        for follower, client in ((f1, c1), (f2, c2)):
            await follower.stop()
            await client.close()


class Disabler:
    """Stands for the broker's tiering manager: answers DisableRemoteTopic requests,
    refusing the first one (as a leader whose image lags would)."""

    def __init__(self, member: ControllerMembership) -> None:
        self.member = member
        self.requests: list[DisableRemoteTopic] = []
        self._answers: list[DisableRemoteAck] = []

    def answers(self) -> list[DisableRemoteAck]:
        return list(self._answers)

    def answered(self, acks: Any) -> None:
        self._answers = [a for a in self._answers if a not in acks]

    def on_disable_remote(self, requests: Any) -> None:
        for r in requests:
            self.requests.append(r)
            error = E.not_leader_or_follower if len(self.requests) == 1 else E.none
            self._answers.append(
                DisableRemoteAck(r.topic_id, r.partition, r.leader_epoch, r.generation, error)
            )
        self.member.beat_soon()


async def test_the_controller_sends_the_disablement_to_the_leader_until_it_answers() -> None:
    """KIP-950: DisableRemoteTopic rides the heartbeat answers to the partition's leader,
    with its leader epoch, until the leader's answer (in a heartbeat) is a success."""
    fake = FakeController(classic_topics=True)
    await fake.start()
    member, follower, client = await start_member(fake, 1, "az-a", session_ms=5000)
    member.requests = disabler = Disabler(member)
    try:
        await eventually(lambda: not member.fenced)
        tiered = {"diskless.enable": "false", "remote.storage.enable": "true"}
        fake.commit(
            fake.logic.create_topics(fake.image, [NewTopic("t", 1, 1, configs=tiered)]).records
        )
        topic = fake.image.topic("t")
        assert topic is not None and topic.partitions[0].leader == 1
        off = ConfigOp("remote.storage.enable", OpType.SET, "false")
        fake.commit(fake.logic.alter_configs(fake.image, [AlterTopicConfigs("t", [off])]).records)

        def state() -> str | None:
            t = fake.image.topic("t")
            return None if t is None or t.tiering is None else t.tiering.state

        await eventually(lambda: state() == "DISABLED")
        p = fake.image.partition(topic.topic_id, 0)
        assert p is not None
        epoch = p.leader_epoch
        sent = DisableRemoteTopic(topic.topic_id, 0, epoch, 0, "retain")
        # Refused once, sent again, then acknowledged: DISABLED; not sent any more.
        assert disabler.requests == [sent, sent]
        assert [a.error_code for a in fake.acks] == [E.not_leader_or_follower, E.none]
        await asyncio.sleep(0.3)  # a few more heartbeats (every 100 ms)
        assert disabler.requests == [sent, sent] and disabler.answers() == []
    finally:
        await member.stop()
        await follower.stop()
        await client.close()
        await fake.close()


# --------------------------------------------------------------------------- a whole broker


@pytest.fixture
async def broker(fake: FakeController, tmp_path: Path) -> AsyncIterator[Broker]:
    # Two more racks, backed by no process but kept alive: managed RF is 3.
    fake.add_broker(2, "az-b")
    fake.add_broker(3, "az-c")
    fake.keep = {2, 3}
    keep = asyncio.create_task(keep_alive(fake))
    config = BrokerConfig(
        node_id=1,
        port=0,
        rack="az-a",
        data_dir=str(tmp_path / "b1"),
        controller_quorum_bootstrap_servers=fake.address,
        controller_secret=SECRET,
        broker_heartbeat_interval_ms=100,
        broker_session_timeout_ms=1000,
        produce_commit_interval_ms=5,
    )
    coordinator, catalog = coordinator_and_catalog(config, ControllerCatalog.from_config(config))
    node = Broker(config, object_store(config), coordinator, catalog)
    await node.start()
    try:
        await eventually(lambda: len(node.endpoints()) == 3)
        yield node
    finally:
        keep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keep
        await node.stop()


async def keep_alive(fake: FakeController) -> None:
    while True:
        for node_id in sorted(fake.keep):
            if node_id in fake.image.brokers:
                fake.beat(node_id)
        await asyncio.sleep(0.1)


VERSION_RANGES = {key: (low, high) for key, _, low, high in VERSIONS}


async def call(broker: Broker, key: int, version: int, data: dict[str, Any]) -> Any:
    """Build the request at ``version``, run the handler, encode and decode its answer."""
    request, ctx = request_and_context(key, version, data)
    handler = build_api_table(broker)[key].handler
    return decode_answer(await settled(await handler(ctx, request)), key, version)


def create_request(name: str, partitions: int = 3, rf: int = -1, **extra: Any) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": rf,
                "assignments": extra.get("assignments", []),
                "configs": extra.get("configs", []),
            }
        ],
        "timeout": 5000,
        "validate_only": extra.get("validate_only", False),
    }


async def metadata(broker: Broker, *names: str, version: int = 12) -> Any:
    return await call(
        broker,
        3,
        version,
        {
            "topics": [{"name": n, "topic_id": None} for n in names],
            "allow_auto_topic_creation": False,
        },
    )


async def test_create_topic_is_placed_by_the_controller(
    broker: Broker, fake: FakeController
) -> None:
    fake.metadata_delay = 0.2  # the follower lags: the answer must wait for it
    answer = await call(broker, 19, 7, create_request("orders", 3))
    (topic,) = answer.topics
    assert topic.error_code == E.none, topic.error_message
    assert topic.num_partitions == 3 and topic.replication_factor == 3
    placed = fake.image.topic("orders")
    assert placed is not None and topic.topic_id == placed.topic_id
    # Read-your-writes: this broker's next Metadata has it, as placed.
    meta = await metadata(broker, "orders")
    (entry,) = meta.topics
    assert entry.error_code == E.none and entry.topic_id == placed.topic_id
    assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3]
    leaders = []
    for p in entry.partitions:
        state = placed.partitions[p.partition_index]
        assert p.error_code == E.none
        assert p.leader_id == state.leader and p.leader_epoch == state.leader_epoch
        assert list(p.replica_nodes) == list(state.replicas)
        assert sorted(p.replica_nodes) == [1, 2, 3]  # one per rack
        assert list(p.isr_nodes) == list(state.isr) and list(p.offline_replicas) == []
        leaders.append(p.leader_id)
    assert sorted(leaders) == [1, 2, 3]  # spread evenly
    # The logs exist under the id the controller recorded.
    infos = await broker.coordinator.log_info([PartitionKey(placed.topic_id, p) for p in range(3)])
    assert [i.error for i in infos] == [0, 0, 0]


async def test_replication_factor_and_assignments_are_refused_by_the_controller(
    broker: Broker, fake: FakeController
) -> None:
    answer = await call(broker, 19, 7, create_request("two", rf=2))
    (topic,) = answer.topics
    assert topic.error_code == E.invalid_replication_factor
    assert topic.error_message is not None and "managed by the controller" in topic.error_message
    assert "3 rack(s)" in topic.error_message
    answer = await call(
        broker,
        19,
        7,
        create_request("manual", assignments=[{"partition_index": 0, "broker_ids": [1]}]),
    )
    assert answer.topics[0].error_code == E.invalid_request
    assert "Manual partition assignments" in (answer.topics[0].error_message or "")
    assert fake.image.topic("two") is None and fake.image.topic("manual") is None
    # validate_only answers as the controller would, without creating anything.
    answer = await call(broker, 19, 7, create_request("dry", 2, validate_only=True))
    assert answer.topics[0].error_code == E.none and answer.topics[0].replication_factor == 3
    assert fake.image.topic("dry") is None
    # ... with the configs it would record: a cluster whose topics are classic by default
    # says diskless.enable=false of the topic it would create, as a real create does.
    fake.logic.config = replace(fake.logic.config, default_diskless=False, classic_topics=True)
    answer = await call(broker, 19, 7, create_request("dry", 2, validate_only=True))
    kind = {c.name: c.value for c in answer.topics[0].configs}["diskless.enable"]
    assert answer.topics[0].error_code == E.none and kind == "false"
    fake.logic.config = replace(fake.logic.config, default_diskless=True, classic_topics=False)
    # Existing topic: TOPIC_ALREADY_EXISTS.
    await call(broker, 19, 7, create_request("once", 1))
    answer = await call(broker, 19, 7, create_request("once", 1))
    assert answer.topics[0].error_code == E.topic_already_exists


async def test_partitions_configs_and_delete_are_forwarded(
    broker: Broker, fake: FakeController
) -> None:
    await call(broker, 19, 7, create_request("t", 1))
    answer = await call(
        broker,
        37,
        3,
        {
            "topics": [{"name": "t", "count": 4, "assignments": None}],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert answer.results[0].error_code == E.none
    assert broker.topics.get("t").partitions == 4  # type: ignore[union-attr]
    meta = await metadata(broker, "t")
    assert [p.partition_index for p in meta.topics[0].partitions] == [0, 1, 2, 3]
    answer = await call(
        broker,
        37,
        3,
        {
            "topics": [{"name": "t", "count": 2, "assignments": None}],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert answer.results[0].error_code == E.invalid_partitions
    # Configs: set, then refused by the controller's rules.
    alter = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
            }
        ],
        "validate_only": False,
    }
    answer = await call(broker, 44, 1, alter)
    assert answer.responses[0].error_code == E.none
    t = fake.image.topic("t")
    assert t is not None and t.configs == {"retention.ms": "1000"}
    assert broker.topics.get("t").configs == {"retention.ms": "1000"}  # type: ignore[union-attr]
    alter["resources"][0]["configs"] = [
        {"name": "diskless.enable", "config_operation": 0, "value": "false"}
    ]
    answer = await call(broker, 44, 1, alter)
    assert answer.responses[0].error_code == E.invalid_config
    # Delete: gone from the controller, this broker, and the coordinator.
    topic_id = t.topic_id
    answer = await call(
        broker, 20, 6, {"topics": [{"name": "t", "topic_id": None}], "timeout": 5000}
    )
    assert answer.responses[0].error_code == E.none
    assert fake.image.topic("t") is None and broker.topics.get("t") is None
    infos = await broker.coordinator.log_info([PartitionKey(topic_id, 0)])
    assert infos[0].error == E.unknown_topic_or_partition
    meta = await metadata(broker, "t")
    assert meta.topics[0].error_code == E.unknown_topic_or_partition


async def test_auto_created_topics_and_topics_made_elsewhere(
    broker: Broker, fake: FakeController
) -> None:
    meta = await call(
        broker,
        3,
        12,
        {"topics": [{"name": "auto", "topic_id": None}], "allow_auto_topic_creation": True},
    )
    assert meta.topics[0].error_code == E.none and len(meta.topics[0].partitions) == 1
    # A topic created through another broker (here: straight at the controller) shows up
    # with its logs, created by this broker's follower.
    fake.commit(fake.logic.create_topics(fake.image, [NewTopic("elsewhere", 2)]).records)
    await eventually(lambda: broker.topics.get("elsewhere") is not None)
    other = fake.image.topic("elsewhere")
    assert other is not None
    infos = await broker.coordinator.log_info([PartitionKey(other.topic_id, 1)])
    assert infos[0].error == 0


async def test_leader_epochs_follow_the_controller(broker: Broker, fake: FakeController) -> None:
    await call(broker, 19, 7, create_request("e", 3))
    topic = fake.image.topic("e")
    assert topic is not None
    # The partition led by broker 2 gets a new leader when 2 is removed for good (a
    # diskless leader that is only lost stays: seed 000, the transformer routes around).
    (index,) = [i for i, p in topic.partitions.items() if p.leader == 2]
    before = topic.partitions[index].leader_epoch
    fake.keep.discard(2)  # its next heartbeat would unfence it and give leadership back
    fake.commit(fake.logic.unregister_broker(fake.image, 2).records)
    assert await broker.controller.follower.wait_for(fake.applied, 5)  # type: ignore[union-attr]
    state = fake.image.topic("e").partitions[index]  # type: ignore[union-attr]
    assert state.leader != 2 and state.leader_epoch == before + 1
    meta = await metadata(broker, "e")
    p = meta.topics[0].partitions[index]
    assert (p.leader_id, p.leader_epoch) == (state.leader, state.leader_epoch)
    assert list(p.offline_replicas) == [2] and 2 not in p.isr_nodes
    assert 2 not in [b.node_id for b in meta.brokers]

    def fetch_request(epoch: int) -> dict[str, Any]:
        return {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic_id": topic.topic_id,
                    "partitions": [
                        {
                            "partition": index,
                            "current_leader_epoch": epoch,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
        }

    fetched = await call(broker, 1, 13, fetch_request(before))
    assert fetched.responses[0].partitions[0].error_code == E.fenced_leader_epoch
    fetched = await call(broker, 1, 13, fetch_request(state.leader_epoch + 1))
    assert fetched.responses[0].partitions[0].error_code == E.unknown_leader_epoch
    fetched = await call(broker, 1, 13, fetch_request(state.leader_epoch))
    assert fetched.responses[0].partitions[0].error_code == E.none
    # OffsetForLeaderEpoch: any epoch up to the current one ends at the high watermark.
    answer = await call(
        broker,
        23,
        4,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "e",
                    "partitions": [
                        {
                            "partition": index,
                            "current_leader_epoch": state.leader_epoch,
                            "leader_epoch": before,
                        }
                    ],
                }
            ],
        },
    )
    part = answer.topics[0].partitions[0]
    assert (part.error_code, part.leader_epoch, part.end_offset) == (E.none, before, 0)


async def test_reassignments_are_forwarded(broker: Broker, fake: FakeController) -> None:
    await call(broker, 19, 7, create_request("r", 1))
    state = fake.image.topic("r").partitions[0]  # type: ignore[union-attr]
    target = list(reversed(state.replicas))[:2]
    answer = await call(
        broker,
        45,
        0,
        {
            "timeout": 5000,
            "topics": [{"name": "r", "partitions": [{"partition_index": 0, "replicas": target}]}],
        },
    )
    assert answer.error_code == E.none
    assert answer.responses[0].partitions[0].error_code == E.none
    # Every target replica is alive: the reassignment completed at once.
    assert list(fake.image.topic("r").partitions[0].replicas) == target  # type: ignore[union-attr]
    meta = await metadata(broker, "r")
    assert list(meta.topics[0].partitions[0].replica_nodes) == target
    listed = await call(broker, 46, 0, {"timeout": 5000, "topics": None})
    assert listed.error_code == E.none and listed.topics == ()
    bad = await call(
        broker,
        45,
        0,
        {
            "timeout": 5000,
            "topics": [{"name": "r", "partitions": [{"partition_index": 0, "replicas": [9]}]}],
        },
    )
    assert bad.responses[0].partitions[0].error_code == E.invalid_replica_assignment


# --------------------------------------------------------------------------- config


def test_controller_mode_config() -> None:
    from broker.admin.configs import _broker_configs
    from broker.config import load_config

    config = load_config(
        {
            "controller.quorum.bootstrap.servers": "c1:9093, c2:9093,c3:9093",
            "controller.secret": "a-random-controller-secret",
        }
    )
    assert config.controller_mode
    assert config.controller_servers() == ["c1:9093", "c2:9093", "c3:9093"]
    shown = {c["name"]: c for c in _broker_configs(config, None, False)}
    assert shown["controller.secret"]["value"] is None
    assert shown["controller.secret"]["is_sensitive"]
    assert not load_config({}).controller_mode
    with pytest.raises(ValueError, match="host:port"):
        load_config(
            {
                "controller.quorum.bootstrap.servers": "c1",
                "controller.secret": "a-random-controller-secret",
            }
        ).controller_servers()


async def test_describe_cluster_for_controller_endpoints_is_a_mismatched_endpoint(
    broker: Broker,
) -> None:
    asked = {"include_cluster_authorized_operations": False}
    brokers = await call(broker, 60, 1, {**asked, "endpoint_type": 1})
    assert brokers.error_code == ErrorCode.none and {b.broker_id for b in brokers.brokers}
    controllers = await call(broker, 60, 1, {**asked, "endpoint_type": 2})
    assert controllers.error_code == ErrorCode.mismatched_endpoint_type
    assert controllers.brokers == ()


async def test_zstd_needs_produce_v7(broker: Broker) -> None:
    from protocol.compression import ZSTD, compress
    from tests.e2e._batches import Record as BatchRecord
    from tests.e2e._batches import build_raw_batch, encode_record

    answer = await call(broker, 19, 7, create_request("old-zstd", 1))
    assert answer.topics[0].error_code == E.none
    now = int(time.time() * 1000)
    records = compress(ZSTD, encode_record(BatchRecord(b"k", b"v"), 0))
    batch = build_raw_batch(records, records_count=1, base_timestamp_ms=now, attributes=ZSTD)

    def produce() -> dict[str, Any]:
        partitions = [{"index": 0, "records": batch}]
        return {
            "transactional_id": None,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [{"name": "old-zstd", "partition_data": partitions}],
        }

    # KIP-110: a client older than Produce v7 cannot have meant zstd.
    old = await call(broker, 0, 6, produce())
    assert old.responses[0].partition_responses[0].error_code == E.unsupported_compression_type
    new = await call(broker, 0, 7, produce())
    assert new.responses[0].partition_responses[0].error_code == E.none


async def test_replication_throttle_rates_are_dynamic_broker_configs(
    broker: Broker, fake: FakeController
) -> None:
    """kafka-configs --entity-type brokers --alter (and kafka-reassign-partitions --throttle):
    the throttle rates go to the controller, per broker or as the default, and are described
    with their source; a static config is still refused."""

    def alter(name: str, key: str, value: str | None, op: int = 0) -> dict:  # type: ignore[type-arg]
        return {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": name,
                    "configs": [{"name": key, "config_operation": op, "value": value}],
                }
            ],
            "validate_only": False,
        }

    rate = "leader.replication.throttled.rate"
    me = str(broker.config.node_id)
    answer = await call(broker, 44, 1, alter("", rate, "1000"))
    assert answer.responses[0].error_code == E.none
    answer = await call(broker, 44, 1, alter(me, rate, "500"))
    assert answer.responses[0].error_code == E.none
    assert broker.classic is not None and broker.classic.leader_quota._rate() == 500

    async def described(name: str) -> tuple[str | None, int]:
        answer = await call(
            broker,
            32,
            4,
            {
                "resources": [
                    {"resource_type": 4, "resource_name": name, "configuration_keys": [rate]}
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        (entry,) = [c for c in answer.results[0].configs if c.name == rate]
        return entry.value, int(entry.config_source)

    assert await described(me) == ("500", 2)  # DYNAMIC_BROKER_CONFIG
    assert await described("") == ("1000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    answer = await call(broker, 44, 1, alter(me, rate, None, op=1))  # DELETE
    assert answer.responses[0].error_code == E.none
    assert await described(me) == ("1000", 3)
    answer = await call(broker, 44, 1, alter(me, "num.partitions", "3"))
    assert answer.responses[0].error_code == E.invalid_request


async def test_a_topic_stores_its_compression_type_and_a_config_change_applies(
    broker: Broker,
) -> None:
    """compression.type: batches are stored in the topic's codec whatever the producer
    sent ('producer' keeps them), and a changed config applies to the next produce (the
    handler caches a topic's settings by its Topic object)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's schema loading
        from kafka.record.default_records import DefaultRecordBatch

    from protocol.compression import CODEC_MASK, GZIP, ZSTD
    from tests.e2e._batches import Record as BatchRecord
    from tests.e2e._batches import build_batch
    from tests.unit._handlers import fetch_body
    from tests.unit.classic.test_brokers import produce_body

    answer = await call(
        broker,
        19,
        7,
        create_request("squeezed", 1, configs=[{"name": "compression.type", "value": "gzip"}]),
    )
    assert answer.topics[0].error_code == E.none

    async def produce_and_read_codec(offset: int) -> int:
        now = int(time.time() * 1000)
        batch = build_batch([BatchRecord(b"k", b"v" * 100)], base_timestamp_ms=now)
        produced = await call(broker, 0, 9, produce_body("squeezed", batch))
        part = produced.responses[0].partition_responses[0]
        assert part.error_code == E.none and part.base_offset == offset
        fetched = await call(broker, 1, 12, fetch_body("squeezed", offset))
        records = fetched.responses[0].partitions[0].records
        stored = DefaultRecordBatch(bytes(records))
        assert [r.value for r in stored] == [b"v" * 100]
        return stored.attributes & CODEC_MASK

    assert await produce_and_read_codec(0) == GZIP
    altered = await call(
        broker,
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "squeezed",
                    "configs": [
                        {"name": "compression.type", "config_operation": 0, "value": "zstd"}
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert altered.responses[0].error_code == E.none
    # The broker learns the new config from the catalog (as its next refresh would).
    await broker.topics.load()
    assert await produce_and_read_codec(1) == ZSTD
