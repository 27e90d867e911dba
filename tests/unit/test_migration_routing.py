"""Which log serves a migrating partition (broker/logs/router.py): produce, fetch by
offset and ListOffsets, in both directions, decided from the metadata image alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import UUID

from broker.logs import router as routing
from controller.logic_config import ControllerConfig
from controller.migration import SealReport
from controller.requests import AlterTopicConfigs, ConfigOp, OpType
from storage.classic.epoch_cache import EpochCache
from tests.unit.controller.harness import Cluster, uuids


class Manager:
    """The replica manager's queries routing uses."""

    def __init__(self, image: Any, hosted: dict[tuple[UUID, int], Any]) -> None:
        self._image = image
        self._hosted = hosted

    def is_classic(self, topic_id: UUID) -> bool:
        return not self._image.topics[topic_id].diskless

    def get(self, topic_id: UUID, partition: int) -> Any:
        return self._hosted.get((topic_id, partition))


def replica(start: int, tiered_from: int | None = None) -> Any:
    """A hosted classic replica whose local log starts at ``start`` (tiered below it from
    ``tiered_from``)."""
    return SimpleNamespace(
        log=SimpleNamespace(log_start_offset=start),
        log_start_offset=start if tiered_from is None else tiered_from,
        list_offset=lambda ts, rc: (0, -1, -1),
        role="leader",
        high_watermark=0,
    )


def setup() -> tuple[Cluster, Any, UUID]:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 2, replication_factor=3, configs={"diskless.enable": "false"})
    topic = c.image.topic("t")
    assert topic is not None
    broker = SimpleNamespace(
        controller=SimpleNamespace(image=c.image), leader_epoch=lambda _t, _p: 0
    )
    # The engines' and Metadata's questions about migrations go to the broker's router.
    broker.router = routing.LogRouter(broker, SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    return c, broker, topic.topic_id


def migrate(c: Cluster, value: str) -> None:
    op = ConfigOp("diskless.enable", OpType.SET, value)
    (r,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs("t", [op])]))
    assert r.error_code == 0


def seal(c: Cluster, index: int, boundary: int, old_start: int = -1, old_bytes: int = 0) -> None:
    topic = c.image.topic("t")
    assert topic is not None and topic.migration is not None
    p = topic.partitions[index]
    report = SealReport(
        p.leader,
        topic.topic_id,
        index,
        topic.migration.generation,
        p.leader_epoch,
        boundary,
        old_bytes,
        old_start,
    )
    assert c.commit(c.logic.partition_sealed(c.image, report)).error_code == 0


def test_classic_to_diskless_routes_by_the_boundary_once_sealed() -> None:
    c, broker, tid = setup()
    classic = Manager(c.image, {(tid, 0): replica(0)})
    migrate(c, "true")
    # Sealing, not sealed yet: still classic everywhere.
    assert routing.appends_classic(broker, classic, tid, 0)
    assert routing.reads_classic(broker, classic, tid, 0, 10**9, -1)
    seal(c, 0, 100)
    # Partition 0 sealed (partition 1 not): appends and reads from 100 are diskless.
    assert not routing.appends_classic(broker, classic, tid, 0)
    assert routing.appends_classic(broker, classic, tid, 1)
    assert routing.reads_classic(broker, classic, tid, 0, 99, -1)
    assert not routing.reads_classic(broker, classic, tid, 0, 100, -1)
    assert routing.reads_classic(broker, classic, tid, 0, 100, 2)  # a follower: classic
    # EARLIEST from the local classic replica, LATEST from the diskless log.
    assert routing.list_offset_route(broker, classic, tid, 0, -2, False) == (0, 0, -1, 0)
    assert routing.list_offset_route(broker, classic, tid, 0, -1, False) == routing.DISKLESS
    assert routing.epochs_route(broker, classic, tid, 0, False, 0, 0) == routing.DISKLESS
    assert routing.epochs_route(broker, classic, tid, 0, True, 0, 0) == routing.CLASSIC
    seal(c, 1, 7)
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless and routing.az_routed(topic)
    assert routing.hosted_classic(c.image, set()) == {tid}  # the sealed logs stay


def test_a_tiered_sealed_classic_log_starts_in_its_remote_part() -> None:
    c, broker, tid = setup()
    # Tiered from 0, the local copies of [0, 60) deleted.
    classic = Manager(c.image, {(tid, 0): replica(60, tiered_from=0)})
    migrate(c, "true")
    seal(c, 0, 100)
    assert routing.list_offset_route(broker, classic, tid, 0, -2, False) == (0, 0, -1, 0)
    assert routing.list_offset_route(broker, classic, tid, 0, -4, False) == (0, 60, -1, 0)
    # Everything tiered and deleted locally: -4 is the diskless log's start.
    classic = Manager(c.image, {(tid, 0): replica(100, tiered_from=0)})
    assert routing.list_offset_route(broker, classic, tid, 0, -4, False) == routing.DISKLESS


def test_a_replica_still_copying_the_sealed_log_redirects_consumers_to_the_leader() -> None:
    from broker.logs.classic.classic_log import classic_slot
    from broker.logs.classic.partition import FOLLOWER

    c, broker, tid = setup()
    migrate(c, "true")
    seal(c, 0, 100)
    copying = SimpleNamespace(
        topic_id=tid, index=0, role=FOLLOWER, leader=1, log=SimpleNamespace(log_end_offset=40)
    )
    manager = SimpleNamespace(get=lambda _t, _p: copying, stopping=False, broker=broker)
    topic = SimpleNamespace(topic_id=tid)

    def slot(offset: int) -> Any:
        part = SimpleNamespace(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
        return classic_slot(manager, "k", topic, part, -1, 11, None)  # type: ignore[arg-type]

    # Below what it holds: read here; above it (still below the boundary): the leader.
    assert slot(10).classic is copying and slot(10).preferred == -1
    redirected = slot(40)
    assert redirected.classic is None and redirected.preferred == 1 and redirected.error == 0
    assert slot(99).preferred == 1


def test_diskless_to_classic_has_three_parts() -> None:
    c, broker, tid = setup()
    migrate(c, "true")
    seal(c, 0, 100)
    seal(c, 1, 7)
    classic = Manager(c.image, {(tid, 0): replica(0)})
    migrate(c, "false")
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless and not routing.az_routed(topic)
    # Sealing: no broker appends to the diskless log, reads are diskless.
    assert routing.refuses_diskless_append(broker, tid, 0)
    assert not routing.appends_classic(broker, classic, tid, 0)
    assert not routing.reads_classic(broker, classic, tid, 0, 150, -1)
    assert routing.reads_classic(broker, classic, tid, 0, 150, 2)  # followers: never diskless
    # LATEST (and a time past the first classic log) until the seal: the diskless log's,
    # never the classic log that continues only at the boundary and is still empty.
    assert routing.list_offset_route(broker, classic, tid, 0, -1, False) == routing.DISKLESS
    assert routing.list_offset_route(broker, classic, tid, 0, 10**12, False) == routing.DISKLESS
    seal(c, 0, 300, old_start=100)
    assert not routing.refuses_diskless_append(broker, tid, 0)
    assert routing.appends_classic(broker, classic, tid, 0)
    # [0, 100) the first classic log, [100, 300) diskless, [300, ...) classic again.
    reads = {o: routing.reads_classic(broker, classic, tid, 0, o, -1) for o in (0, 99, 100, 299)}
    assert reads == {0: True, 99: True, 100: False, 299: False}
    assert routing.reads_classic(broker, classic, tid, 0, 300, -1)
    assert routing.list_offset_route(broker, classic, tid, 0, -2, False) == (0, 0, -1, 0)
    assert routing.list_offset_route(broker, classic, tid, 0, -1, False) == routing.CLASSIC
    # Without the old classic log here, the earliest offset is the diskless log's.
    bare = Manager(c.image, {})
    assert routing.list_offset_route(broker, bare, tid, 0, -2, False) == routing.DISKLESS
    # A consumer's OffsetForLeaderEpoch: the classic cache's answer for the epochs the
    # classic log wrote from the boundary (300) on, the log end for older ones (the diskless
    # part's); never the high watermark, which trails the log end on a new leader.
    leader = replica(300)
    leader.high_watermark = 420
    epochs = EpochCache(None)
    epochs.assign(4, 300)
    epochs.assign(5, 400)
    leader.log.epochs, leader.log.log_end_offset = epochs, 450
    leader.end_offset_for = lambda e: epochs.end_offset_for(e, 450)
    led = Manager(c.image, {(tid, 0): leader})
    asked = {e: routing.epochs_route(broker, led, tid, 0, False, e, 5) for e in (3, 4, 5, 6)}
    assert asked == {3: (0, 3, 450), 4: (0, 4, 400), 5: (0, 5, 450), 6: (0, -1, -1)}


# --- a consumer starting from the earliest offset in every window of both seals -------------


DISKLESS_START = 100  # the diskless log's start: the first boundary


def earliest(broker: Any, classic: Manager, tid: UUID) -> int | str:
    """What ListOffsets EARLIEST answers on this broker once routing decided (as
    broker/fetch/list_offsets.py does): an offset, or the name of a retriable error."""
    route = routing.list_offset_route(broker, classic, tid, 0, -2, False)
    if isinstance(route, tuple):
        return route[1] if route[0] == 0 else "error"
    if route == routing.CLASSIC or (route is None and classic.is_classic(tid)):
        p = classic.get(tid, 0)
        return "error" if p is None else p.log_start_offset
    return DISKLESS_START


def fetched_from(broker: Any, classic: Manager, tid: UUID, offset: int) -> str:
    """The log a consumer's fetch at ``offset`` reads on this broker."""
    reads = routing.reads_classic(broker, classic, tid, 0, offset, -1)
    return routing.CLASSIC if reads else routing.DISKLESS


def seen_through_both_seals(role: str) -> dict[str, tuple[int | str, str]]:
    """(EARLIEST, the log offset 0 is read from) on a broker holding a replica (``role``)
    of partition 0's first classic log [0, 100), in each window its image can show."""
    c, broker, tid = setup()
    first = replica(0)
    first.role = role
    classic = Manager(c.image, {(tid, 0): first})
    seen: dict[str, tuple[int | str, str]] = {}

    def look(window: str) -> None:
        seen[window] = (earliest(broker, classic, tid), fetched_from(broker, classic, tid, 0))

    look("classic")
    migrate(c, "true")
    look("to diskless: pending")
    seal(c, 0, DISKLESS_START, old_bytes=4096)
    look("to diskless: sealed")
    seal(c, 1, 7, old_bytes=512)
    look("to diskless: migrated, replicas moving")
    migrate(c, "false")
    look("to classic: pending")  # issue 31: EARLIEST was 100, offset 0 diskless
    seal(c, 0, 300, old_start=DISKLESS_START)
    look("to classic: sealed")
    seal(c, 1, 20, old_start=7)
    look("to classic: migrated")
    # Between the first classic log and the classic log again: the diskless log.
    assert fetched_from(broker, classic, tid, DISKLESS_START) == routing.DISKLESS
    return seen


def test_earliest_and_offset_0_stay_in_the_first_classic_log_through_both_seals() -> None:
    """Issue 31: a group that started while its topic was sealed towards classic again
    began at the diskless log's start, skipping the first classic log. Whatever phase a
    broker's image shows, EARLIEST is 0 and offset 0 is read from the classic replica
    that holds it (a follower's view too: any replica answers below the boundary)."""
    for role in ("leader", "follower"):
        seen = seen_through_both_seals(role)
        assert seen == {w: (0, routing.CLASSIC) for w in seen}, (role, seen)


def test_a_broker_without_the_sealed_classic_log_never_answers_the_diskless_start() -> None:
    """EARLIEST on a broker holding no replica of the classic log below the boundary (a
    client routed by AZ to it): a retriable error, not the diskless log's start, which
    would make a consumer skip the classic part. Once that part is empty (retention),
    the diskless start is the earliest offset."""
    c, broker, tid = setup()
    bare = Manager(c.image, {})
    migrate(c, "true")
    seal(c, 0, DISKLESS_START, old_bytes=4096)
    seal(c, 1, 0)
    assert earliest(broker, bare, tid) == "error"
    migrate(c, "false")
    assert earliest(broker, bare, tid) == "error"
    seal(c, 0, 300, old_start=DISKLESS_START)
    assert earliest(broker, bare, tid) == "error"


def test_the_az_transformer_sends_readers_of_a_sealed_classic_log_to_its_replicas() -> None:
    """A client in an AZ without a replica of the partition (rack d) is not hashed to a
    broker of its AZ while the sealed classic log has records (that broker could not serve
    them): it gets the leader. Once retention emptied the classic log, its AZ again."""
    from broker.metadata.metadata_handler import _controller_partition_entry
    from broker.metadata.transformer import Routing

    c, broker, tid = setup()
    migrate(c, "true")
    seal(c, 0, DISKLESS_START, old_bytes=4096)
    seal(c, 1, 7)  # nothing left in partition 1's classic log
    topic = SimpleNamespace(topic_id=tid, name="t")
    alive = {1: "a", 2: "b", 3: "c", 4: "d"}

    def leader(partition: int) -> int:
        entry = _controller_partition_entry(broker, topic, partition, Routing(alive, "d"))
        return int(entry["leader_id"])

    image = c.image.topics[tid]
    assert image.diskless and routing.az_routed(image)
    assert leader(0) == image.partitions[0].leader
    assert leader(1) == 4


def test_a_snapshot_keeps_the_earlier_migrations_boundaries() -> None:
    """A broker or controller starting from a snapshot taken while the topic is sealed
    towards classic routes offsets below the first boundary to the classic log too."""
    from controller.image import MetadataImage

    c, broker, tid = setup()
    migrate(c, "true")
    seal(c, 0, DISKLESS_START, old_bytes=4096)
    seal(c, 1, 7)
    migrate(c, "false")
    replayed = MetadataImage.from_records(c.image.snapshot())
    topic = replayed.topics[tid]
    assert topic.migration == c.image.topics[tid].migration
    view = SimpleNamespace(
        controller=SimpleNamespace(image=replayed), leader_epoch=broker.leader_epoch
    )
    classic = Manager(replayed, {(tid, 0): replica(0)})
    assert (earliest(view, classic, tid), fetched_from(view, classic, tid, 0)) == (
        0,
        routing.CLASSIC,
    )


# --- a replica's log at the boundary (broker/logs/migration/sealer.py on_replica) -------------


def partition(tmp_path: Any, records: int) -> Any:
    from storage.classic.log import Log, LogConfig
    from tests.unit.classic.test_log import append, batch

    plog = Log(str(tmp_path), LogConfig(retention_ms=0))
    for _ in range(records):
        append(plog, batch(1, ts=1_000))
    return SimpleNamespace(
        log=plog, index=0, topic="t", topic_id=None, sealed=False, high_watermark=records
    )


def test_a_log_sealed_for_diskless_retires_whole_and_one_for_classic_continues(
    tmp_path: Any,
) -> None:
    from broker.logs.migration.sealer import MigrationSealer

    c, _broker, _tid = setup()
    sealer = MigrationSealer(SimpleNamespace())  # type: ignore[arg-type]
    migrate(c, "true")
    seal(c, 0, 3)
    seal(c, 1, 0)
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless
    p = partition(tmp_path / "a", 3)
    sealer.on_replica(p, topic)
    # The last segment is closed: retention can delete every record, the log stays at 3.
    assert p.log.log_end_offset == 3 and p.log.active.size == 0
    assert p.log.enforce_retention() == 1 and p.log.log_start_offset == 3
    # Back to classic at 10 (the diskless log held [3, 10)): the log continues at 10,
    # keeping what it has, and refuses appends until its producer states are loaded.
    migrate(c, "false")
    seal(c, 0, 10, old_start=3)
    q = partition(tmp_path / "b", 3)
    sealer.on_replica(q, topic)
    assert (q.log.log_start_offset, q.log.log_end_offset) == (0, 10)
    assert q.sealed and q.high_watermark == 10
    assert q.log.read(0, 1 << 20)  # the older records are still there
    empty = partition(tmp_path / "c", 0)
    sealer.on_replica(empty, topic)
    assert (empty.log.log_start_offset, empty.log.log_end_offset) == (10, 10)


async def test_a_replica_continuing_at_the_boundary_takes_the_diskless_producer_states() -> None:
    from broker.logs.classic.producer_state import ProducerState
    from broker.logs.migration.sealer import MigrationSealer
    from storage.coordinator import SealedLog, SeededProducerBatch

    batches = [SeededProducerBatch(7, 2, 0, 4, 10, 14), SeededProducerBatch(7, 2, 5, 9, 15, 19)]
    coordinator = SimpleNamespace()

    async def seal_log(_key: Any) -> SealedLog:
        return SealedLog(0, 0, 20, 0, batches)

    coordinator.seal_log = seal_log
    broker = SimpleNamespace(coordinator=coordinator, watch=SimpleNamespace(wake=lambda _k: None))
    sealer = MigrationSealer(broker)  # type: ignore[arg-type]
    p = SimpleNamespace(topic_id=UUID(int=1), index=0, topic="t", sealed=True)
    p.producers = ProducerState()
    # The replica's classic log below the diskless part knew producer 7 (older batches):
    # replaced. Producer 8 wrote to the classic log from the boundary on: kept.
    p.producers.update(7, 2, 0, 3, 0)
    p.producers.update(8, 0, 0, 2, 20)
    batches.append(SeededProducerBatch(8, 0, 0, 0, 3, 3))
    await sealer._continue(p, 1)  # type: ignore[arg-type]
    assert not p.sealed
    assert p.producers.check(8, 0, 2, 2) == (None, None)
    # A retry of the last diskless batch is its duplicate; the next sequence is accepted,
    # a gap is not.
    assert p.producers.check(7, 2, 5, 9) == (None, (15, 19))
    assert p.producers.check(7, 2, 10, 12) == (None, None)
    assert p.producers.check(7, 2, 11, 12)[0] is not None


def test_a_follower_short_of_the_earlier_seal_fetches_the_rest_instead_of_leaving_a_hole(
    tmp_path: Any,
) -> None:
    """A replica that was down when the classic log was sealed for diskless (at 3) holds one
    record. Back to classic at 10: continuing at 10 would leave [1, 3) missing for good;
    as a follower it keeps its log as it is and fetches the rest from the leader (whose log
    jumps from 3 to 10). The leader itself continues at 10 whatever it holds."""
    from broker.logs.migration.sealer import MigrationSealer

    c, _broker, _tid = setup()
    migrate(c, "true")
    seal(c, 0, 3, old_bytes=300)
    seal(c, 1, 0)
    migrate(c, "false")
    seal(c, 0, 10, old_start=3)
    topic = c.image.topic("t")
    assert topic is not None
    leader = topic.partitions[0].leader
    follower = next(r for r in topic.partitions[0].replicas if r != leader)
    on_follower = MigrationSealer(SimpleNamespace(config=SimpleNamespace(node_id=follower)))  # type: ignore[arg-type]
    short = partition(tmp_path / "a", 1)
    on_follower.on_replica(short, topic)
    assert short.log.log_end_offset == 1 and short.high_watermark == 1
    # A follower holding the whole sealed log continues at the boundary, as before.
    whole = partition(tmp_path / "b", 3)
    on_follower.on_replica(whole, topic)
    assert whole.log.log_end_offset == 10
    on_leader = MigrationSealer(SimpleNamespace(config=SimpleNamespace(node_id=leader)))  # type: ignore[arg-type]
    leading = partition(tmp_path / "c", 1)
    on_leader.on_replica(leading, topic)
    assert leading.log.log_end_offset == 10


# --- a fetch that outlasts the seals (its long poll reads its partition again) ---------------


def test_a_fetch_routed_before_both_seals_never_reads_the_classic_log_past_the_gap(
    tmp_path: Any,
) -> None:
    """A consumer at the end of the classic log (3) long-polls it; the topic goes to
    diskless ([3, 10) in the diskless log) and back, and the classic log continues at 10.
    Its slot, opened by the classic log, answered with the batches at 10 on its next read
    (a read at an offset in a gap gets the batches after it): the consumer skipped [3, 10).
    Once a seal moves its offset to the diskless log, the slot reads and waits on nothing,
    so the consumer asks again and is routed there."""
    from broker.logs.classic.classic_log import ClassicLog
    from broker.logs.classic.partition import LEADER, ClassicPartition
    from broker.logs.diskless.diskless_log import DisklessLog
    from broker.logs.fetch_slots import FetchBudget
    from broker.logs.migration.sealer import MigrationSealer
    from broker.logs.partition_log import ReadPlan
    from storage.classic.batches import walk
    from storage.classic.log import Log, LogConfig
    from tests.unit.classic.test_log import append, batch

    c, broker, tid = setup()
    plog = Log(str(tmp_path), LogConfig())
    append(plog, batch(3))
    p = ClassicPartition(tid, "t", 0, plog, me=1, lag_max_ms=10_000)
    p.role, p.high_watermark = LEADER, 3
    broker.classic = Manager(c.image, {(tid, 0): p})
    broker.classic.stopping = False
    classic, diskless = ClassicLog(broker, None), DisklessLog(broker)  # type: ignore[arg-type]
    router = routing.LogRouter(broker, diskless, classic)
    topic = SimpleNamespace(topic_id=tid)

    def opened(log: Any, offset: int) -> tuple[Any, ReadPlan]:
        plan = ReadPlan(-1, 16, None, None, router.log_start, router.consumer_read)
        part = SimpleNamespace(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
        assert router.consumer_read(tid, 0, offset) is log  # as the Fetch handler routes it
        return log.open_read("t", topic, part, plan), plan

    def read(slot: Any, plan: ReadPlan) -> list[tuple[int, int]]:
        classic.read_round(slot, FetchBudget(1 << 20), plan, False)
        return [(b.base_offset, b.last_offset) for b in walk(slot.data)]

    waiting, plan = opened(classic, 3)
    assert read(waiting, plan) == [] and classic.interests(waiting, plan) == [(tid, 0, 3)]
    migrate(c, "true")
    seal(c, 0, 3, old_bytes=4096)
    seal(c, 1, 0)
    assert read(waiting, plan) == []
    # Offset 3 is the diskless log's now: the long poll stops waiting on the classic log.
    after_first_seal = classic.interests(waiting, plan)
    migrate(c, "false")
    at_end, end_plan = opened(diskless, 10)  # a consumer that read [3, 10), waiting at 10
    assert diskless.interests(at_end, end_plan) == [(tid, 0, 10)]
    seal(c, 0, 10, old_start=3)
    image = c.image.topic("t")
    assert image is not None
    MigrationSealer(SimpleNamespace(config=SimpleNamespace(node_id=1))).on_replica(p, image)  # type: ignore[arg-type]
    append(plog, batch(2))
    p.high_watermark = 12
    assert (plog.log_end_offset, router.consumer_read(tid, 0, 3)) == (12, diskless)
    # The classic log holds [0, 3) and [10, 12): never the answer to a read at 3.
    assert read(waiting, plan) == []
    assert after_first_seal == [] and classic.interests(waiting, plan) == []
    # Sealed at 10, the diskless log takes nothing more: its waiter asks the classic log.
    assert diskless.interests(at_end, end_plan) == []
    fresh, fresh_plan = opened(classic, 10)
    assert read(fresh, fresh_plan) == [(10, 11)]
    below, below_plan = opened(classic, 1)
    assert read(below, below_plan) == [(0, 2)]
