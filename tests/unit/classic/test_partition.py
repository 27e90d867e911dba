"""A classic partition replica: leader appends, acks=all on the high watermark, follower
progress, idempotent producers, min.insync.replicas, offsets, follower appends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import FOLLOWER, LEADER, ClassicPartition
from broker.logs.classic.producer_state import ProducerState
from broker.logs.partition_log import PartitionResult
from controller.image import PartitionState
from protocol.records import parse_batches
from storage.classic.batches import walk
from storage.classic.log import Log, LogConfig
from tests.e2e._batches import Record, build_batch

TOPIC_ID = __import__("uuid").UUID(int=7)


def records(n: int = 1, ts: int = 1_000, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    return build_batch(
        [Record(b"k", b"v%d" % i) for i in range(n)],
        base_timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def partition(tmp_path: Path, me: int = 1, name: str = "p", min_isr: int = 1) -> ClassicPartition:
    plog = Log(str(tmp_path / name), LogConfig(min_insync_replicas=min_isr))
    return ClassicPartition(TOPIC_ID, "t", 0, plog, me, lag_max_ms=1000)


def lead(p: ClassicPartition, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 1) -> None:
    p.apply(PartitionState((1, 2, 3), isr, p.me, epoch, epoch), lambda _p: None)


def produce(
    p: ClassicPartition, data: bytes, acks: int = -1, timeout_ms: int = 5_000
) -> PartitionResult | asyncio.Future[PartitionResult]:
    view = memoryview(data)
    return p.append(view, parse_batches(view, 1 << 20), False, acks, timeout_ms)


def test_acks_all_completes_when_every_isr_member_has_fetched(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        assert p.role == LEADER
        waiting = produce(p, records(3))
        assert isinstance(waiting, asyncio.Future) and not waiting.done()
        # Consumers see nothing above the high watermark.
        assert p.read(0, 1 << 20, -1) == (0, b"")
        p.read(0, 1 << 20, 2)  # follower 2 fetches from 0: nothing replicated yet
        p.read(3, 1 << 20, 2)  # follower 2 has everything
        assert not waiting.done()
        p.read(3, 1 << 20, 3)
        assert waiting.done() and waiting.result() == PartitionResult(0, 0, -1, 0)
        assert p.high_watermark == 3
        error, data = p.read(0, 1 << 20, -1)
        assert error == 0 and [(b.base_offset, b.last_offset) for b in walk(data)] == [(0, 2)]
        # acks=1: answered after the local append, before replication.
        assert produce(p, records(1), acks=1) == PartitionResult(0, 3, -1, 0)

    asyncio.run(run())


def test_min_insync_replicas_refuses_before_the_append(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path, min_isr=3)
        lead(p, isr=(1, 2))
        # With the partition's log start offset, as Kafka answers it (its generic append
        # failure path; the three-broker differential sessions found -1 here).
        assert produce(p, records()) == PartitionResult(
            int(ErrorCode.not_enough_replicas), log_start_offset=0
        )
        assert p.log.log_end_offset == 0
        # acks=1 ignores min.insync.replicas, as in Kafka.
        assert produce(p, records(), acks=1).error == 0

    asyncio.run(run())


def test_min_insync_replicas_above_the_replication_factor_counts_as_all_replicas(
    tmp_path: Path,
) -> None:
    """Kafka's effectiveMinIsr: min.insync.replicas=3 on a one-replica partition asks for
    that one replica, so acks=all writes are taken and the high watermark moves."""

    async def run() -> None:
        p = partition(tmp_path, min_isr=3)
        p.apply(PartitionState((1,), (1,), 1, 1, 1), lambda _p: None)
        assert produce(p, records(2)) == PartitionResult(0, 0, -1, 0)
        assert p.high_watermark == 2

    asyncio.run(run())


def test_high_watermark_held_while_the_isr_is_below_min_insync_replicas(
    tmp_path: Path,
) -> None:
    """Kafka 4 (KIP-966): a leader whose ISR is smaller than min.insync.replicas does not
    move its high watermark, so an acks=1 write is not shown to consumers, and an acks=all
    write made before the ISR shrank is answered only once the ISR is back (or times out)."""

    async def run() -> None:
        p = partition(tmp_path, min_isr=2)
        lead(p)
        waiting = produce(p, records())  # offset 0, acks=all, ISR 1,2,3
        assert isinstance(waiting, asyncio.Future)
        # The controller takes 2 and 3 out of the ISR before either fetched it.
        p.apply(PartitionState((1, 2, 3), (1,), 1, 1, 2), lambda _p: None)
        assert produce(p, records(), acks=1).error == 0  # offset 1
        p._advance()
        assert p.high_watermark == 0 and not waiting.done()
        assert p.read(0, 1 << 20, -1) == (0, b"")
        assert produce(p, records()).error == ErrorCode.not_enough_replicas
        # 2 catches up and is back in the ISR: two of three, the minimum; everything
        # replicated to it is committed.
        p.read(2, 1 << 20, 2)
        p.apply(PartitionState((1, 2, 3), (1, 2), 1, 1, 3), lambda _p: None)
        assert p.high_watermark == 2
        assert waiting.done() and waiting.result() == PartitionResult(0, 0, -1, 0)
        error, data = p.read(0, 1 << 20, -1)
        assert error == 0 and [(b.base_offset, b.last_offset) for b in walk(data)] == [
            (0, 0),
            (1, 1),
        ]

    asyncio.run(run())


def test_acks_all_waiting_while_the_isr_is_short_times_out(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path, min_isr=3)
        lead(p)
        waiting = produce(p, records(), timeout_ms=50)
        assert isinstance(waiting, asyncio.Future)
        p.read(1, 1 << 20, 2)
        # 3 leaves the ISR before it fetched the batch: two of three, below the minimum,
        # so the high watermark stays at 0 even though 2 has the batch (Kafka 4 answers
        # REQUEST_TIMED_OUT here; before KIP-966 it answered NOT_ENOUGH_REPLICAS_AFTER_APPEND).
        p.apply(PartitionState((1, 2, 3), (1, 2), 1, 1, 2), lambda _p: None)
        assert p.high_watermark == 0
        assert (await waiting).error == ErrorCode.request_timed_out

    asyncio.run(run())


def test_not_leader_and_losing_leadership(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        waiting = produce(p, records())
        assert isinstance(waiting, asyncio.Future)
        p.apply(PartitionState((1, 2, 3), (1, 2, 3), 2, 2, 2), lambda _p: None)
        assert p.role == FOLLOWER and p.needs_truncation
        assert waiting.result().error == ErrorCode.not_leader_or_follower
        assert produce(p, records()).error == ErrorCode.not_leader_or_follower
        assert p.read(0, 100, 3)[0] == ErrorCode.not_leader_or_follower

    asyncio.run(run())


def test_idempotent_retry_is_not_appended_twice_and_gaps_are_refused(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p, isr=(1,))
        assert produce(p, records(2, pid=9, epoch=0, seq=0)).base_offset == 0
        assert produce(p, records(2, pid=9, epoch=0, seq=2)).base_offset == 2
        # A retry of the first batch: its offset, nothing appended.
        # A retry: its original offset and, as Kafka answers a duplicate, the original
        # batch's timestamp as the log append time (CreateTime: its max timestamp).
        retry = records(2, ts=5_000, pid=9, epoch=0, seq=0)
        assert produce(p, retry) == PartitionResult(0, 0, 1_000, 0)
        assert p.log.log_end_offset == 4
        assert produce(p, records(1, pid=9, epoch=0, seq=7)).error == (
            ErrorCode.out_of_order_sequence_number
        )
        # A fenced (older) epoch.
        assert produce(p, records(1, pid=9, epoch=0, seq=4)).base_offset == 4
        assert produce(p, records(1, pid=9, epoch=1, seq=0)).base_offset == 5
        assert produce(p, records(1, pid=9, epoch=0, seq=5)).error == (
            ErrorCode.invalid_producer_epoch
        )
        # The state survives a restart: rebuilt from the log.
        p.log.close()
        again = ClassicPartition(TOPIC_ID, "t", 0, Log(p.log.dir, LogConfig()), 1, 1000)
        lead(again, isr=(1,), epoch=2)
        assert produce(again, records(1, pid=9, epoch=1, seq=0)).base_offset == 5
        assert again.log.log_end_offset == 6

    asyncio.run(run())


def test_acks_all_retry_of_a_batch_above_the_high_watermark_waits_for_it(
    tmp_path: Path,
) -> None:
    """The lost-ack audit: followers paused, the original acks=all answer timed out, the
    producer retried the same batch. The retry must not be acknowledged until the high
    watermark passes the batch: only this leader holds it, and it may yet be lost."""

    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        first = produce(p, records(1, pid=9, epoch=0, seq=0))
        assert isinstance(first, asyncio.Future)
        retry = produce(p, records(1, pid=9, epoch=0, seq=0))
        assert isinstance(retry, asyncio.Future) and not retry.done()
        assert p.log.log_end_offset == 1  # nothing appended twice
        p.read(1, 1 << 20, 2)
        assert not retry.done()  # one follower is not enough: 3 is still in the ISR
        p.read(1, 1 << 20, 3)
        # The original offset; a duplicate carries the original batch's timestamp as its
        # log append time (Kafka's BatchMetadata), the original -1 (CreateTime).
        assert first.result() == PartitionResult(0, 0, -1, 0)
        assert retry.result() == PartitionResult(0, 0, 1_000, 0)
        # Once replicated, a retry is answered at once with the original offset.
        assert produce(p, records(1, pid=9, epoch=0, seq=0)) == PartitionResult(0, 0, 1_000, 0)
        # acks=1 never waited for replication, for a retry either.
        pending = produce(p, records(1, pid=9, epoch=0, seq=1), acks=1)
        assert pending == PartitionResult(0, 1, -1, 0)
        # (the retry answered as a duplicate: the original batch's timestamp)
        assert produce(p, records(1, pid=9, epoch=0, seq=1), acks=1) == pending._replace(
            log_append_time=1_000
        )

    asyncio.run(run())


def test_acks_all_on_a_log_append_time_topic_answers_the_append_time(tmp_path: Path) -> None:
    """Kafka answers LogAppendTime produces with the time it stamped, acks=all too (the
    answer once replicated used to say -1)."""

    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        view = memoryview(records(1))
        before = int(time.time() * 1000)
        pending = p.append(view, parse_batches(view, 1 << 20), True, -1, 5_000)
        assert isinstance(pending, asyncio.Future)
        p.read(1, 1 << 20, 2)
        p.read(1, 1 << 20, 3)
        answer = await pending
        assert (answer.error, answer.base_offset) == (0, 0)
        assert before <= answer.log_append_time <= int(time.time() * 1000)

    asyncio.run(run())


def test_acks_all_retry_times_out_while_the_followers_do_not_fetch(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        produce(p, records(1, pid=9, epoch=0, seq=0))
        view = memoryview(records(1, pid=9, epoch=0, seq=0))
        retry = p.append(view, parse_batches(view, 1 << 20), False, -1, 50)
        assert isinstance(retry, asyncio.Future)
        assert (await retry).error == ErrorCode.request_timed_out

    asyncio.run(run())


def test_a_new_leader_answers_a_retry_of_a_replicated_batch_only_past_its_high_watermark(
    tmp_path: Path,
) -> None:
    """The batch reached a follower but not the high watermark; the follower becomes
    leader and the producer retries there: a duplicate (the follower knows the producer
    from the copied batch) that waits for the new leader's high watermark."""

    async def run() -> None:
        old = partition(tmp_path, 1, "old")
        lead(old)
        produce(old, records(2, pid=4, epoch=0, seq=0))
        new = partition(tmp_path, 2, "new")
        new.apply(PartitionState((1, 2, 3), (1, 2, 3), 1, 1, 1), lambda _p: None)
        error, data = old.read(0, 1 << 20, 2)
        assert error == 0
        new.append_fetched(data, old.high_watermark, 0)
        assert new.high_watermark == 0 and new.log.log_end_offset == 2
        new.apply(PartitionState((1, 2, 3), (2, 3), 2, 2, 2), lambda _p: None)
        assert new.role == LEADER
        retry = produce(new, records(2, pid=4, epoch=0, seq=0))
        assert isinstance(retry, asyncio.Future) and not retry.done()
        assert new.log.log_end_offset == 2
        new.read(2, 1 << 20, 3)
        assert retry.result() == PartitionResult(0, 0, 1_000, 0)  # a duplicate: its timestamp

    asyncio.run(run())


def test_follower_appends_the_leaders_batches_and_truncates(tmp_path: Path) -> None:
    async def run() -> None:
        leader = partition(tmp_path, 1, "leader")
        lead(leader, isr=(1,))
        for i in range(3):
            produce(leader, records(2, ts=1_000 + i, pid=5, epoch=0, seq=2 * i))
        follower = partition(tmp_path, 2, "follower")
        follower.apply(PartitionState((1, 2, 3), (1,), 1, 1, 1), lambda _p: None)
        assert follower.role == FOLLOWER
        error, data = leader.read(0, 1 << 20, 2)
        assert error == 0
        follower.append_fetched(data, leader.high_watermark, 0)
        assert follower.log.log_end_offset == 6 and follower.high_watermark == 6
        assert follower.log.epochs.entries == [(1, 0)]
        follower.truncate(2)
        assert follower.log.log_end_offset == 2
        # Producer state follows the truncation: seq 2 is next again, not a duplicate.
        state: ProducerState = follower.producers
        assert state.check(5, 0, 2, 3) == (None, None)

    asyncio.run(run())


def test_list_offsets_by_time_and_latest_stop_at_the_high_watermark(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p, isr=(1,))
        produce(p, records(2, ts=1_000))
        produce(p, records(2, ts=2_000))
        assert p.list_offset(-2) == (0, 0, -1)
        assert p.list_offset(-1) == (0, 4, -1)
        assert p.list_offset(1_500) == (0, 2, 2_000)
        assert p.list_offset(-3) == (0, 2, 2_000)
        assert p.list_offset(9_000) == (0, -1, -1)
        assert p.end_offset_for(1) == (1, 4)

    asyncio.run(run())


def test_flush_ms_is_honoured_without_new_appends(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from broker.logs.classic.replica_manager import ReplicaManager

    async def run() -> None:
        plog = Log(str(tmp_path / "f"), LogConfig(flush_ms=100))
        p = ClassicPartition(TOPIC_ID, "t", 0, plog, 1, 1000)
        lead(p, isr=(1,))
        produce(p, records(1))
        assert plog.unflushed == 1
        manager = ReplicaManager.__new__(ReplicaManager)
        manager.partitions = {(TOPIC_ID, 0): p}
        manager.broker = SimpleNamespace()
        assert manager.flush_due(plog.last_flush + 0.05) == 0
        assert manager.flush_due(plog.last_flush + 0.2) == 1 and plog.unflushed == 0

    asyncio.run(run())


def test_a_returning_leader_cuts_its_divergent_tail_kip_279(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from broker.logs.classic.replica_fetcher import ReplicaFetcher

    async def run() -> None:
        old = partition(tmp_path, 1, "old")  # leader at epoch 1
        new = partition(tmp_path, 2, "new")
        lead(old, isr=(1, 2), epoch=1)
        new.apply(PartitionState((1, 2, 3), (1, 2), 1, 1, 1), lambda _p: None)
        produce(old, records(3))
        _, data = old.read(0, 1 << 20, 2)
        new.append_fetched(data, 0, 0)
        produce(old, records(3))  # offsets 3-5: never replicated (the old leader dies)
        # Broker 2 leads at epoch 2 and writes offsets 3-4 of its own.
        new.apply(PartitionState((1, 2, 3), (2,), 2, 2, 2), lambda _p: None)
        assert new.role == LEADER
        produce(new, records(2))
        old.apply(PartitionState((1, 2, 3), (2,), 2, 2, 3), lambda _p: None)
        assert old.role == FOLLOWER and old.needs_truncation

        broker = SimpleNamespace(config=SimpleNamespace(replica_fetch_backoff_ms=10))
        fetcher = ReplicaFetcher(SimpleNamespace(me=1, broker=broker), 2, "h", 1)  # type: ignore[arg-type]

        async def ask(asks: list[tuple[ClassicPartition, int]]) -> dict:
            return {(p.topic, p.index): (0, *new.end_offset_for(e)) for p, e in asks}

        fetcher._ask_epochs = ask  # type: ignore[method-assign]
        await fetcher._truncate([old])
        assert old.log.log_end_offset == 3 and not old.needs_truncation
        _, data = new.read(3, 1 << 20, 1)
        old.append_fetched(data, 5, 0)
        assert old.log.read(0, 1 << 20) == new.log.read(0, 1 << 20)
        assert old.log.epochs.entries == [(1, 0), (2, 3)]

    asyncio.run(run())


def test_a_log_directory_is_kept_for_its_topic_and_cleared_for_a_namesake(tmp_path: Path) -> None:
    import uuid
    from types import SimpleNamespace

    from broker.logs.classic.replica_manager import ReplicaManager

    async def run() -> None:
        manager = ReplicaManager.__new__(ReplicaManager)
        manager.me = 1
        manager.broker = SimpleNamespace(
            config=SimpleNamespace(data_dir=str(tmp_path), replica_lag_time_max_ms=1000)
        )
        p = manager._open(TOPIC_ID, "t", 0, LogConfig())
        lead(p, isr=(1,))
        produce(p, records(3))
        p.close()
        # Reopened for the same topic: the records are still there.
        again = manager._open(TOPIC_ID, "t", 0, LogConfig())
        assert again.log.log_end_offset == 3
        again.close()
        # A new topic of the same name (the old one deleted while this broker was away).
        other = manager._open(uuid.uuid4(), "t", 0, LogConfig())
        assert other.log.log_end_offset == 0
        other.close()

    asyncio.run(run())


def test_the_high_watermark_survives_a_restart(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path)
        lead(p)
        produce(p, records(3), acks=1)
        p.read(3, 1 << 20, 2)
        p.read(3, 1 << 20, 3)
        produce(p, records(2), acks=1)  # not replicated: above the high watermark
        assert p.high_watermark == 3
        p.close()
        again = ClassicPartition(TOPIC_ID, "t", 0, Log(p.log.dir, LogConfig()), 1, 1000)
        assert again.high_watermark == 3 and again.log.log_end_offset == 5

    asyncio.run(run())


def test_a_stale_view_of_the_partition_is_ignored(tmp_path: Path) -> None:
    """A replica whose log holds leader epoch 5 is told by an old image that it leads at
    epoch 3: it must not become that past leader (its epoch history would be rewritten, and
    a follower of the real leader would then truncate acknowledged records)."""
    p = partition(tmp_path)
    lead(p, epoch=5)
    produce(p, records(3), acks=1)
    p.close()
    again = partition(tmp_path)
    assert again.log.epochs.latest_epoch == 5
    lead(again, epoch=3)  # a stale image
    assert again.role != LEADER and again.log.epochs.latest_epoch == 5
    lead(again, epoch=6)  # the current one
    assert again.role == LEADER and again.log.epochs.latest_epoch == 6
    again.close()


def test_a_leader_asks_to_add_only_unfenced_followers_to_the_isr(tmp_path: Path) -> None:
    """KIP-841: a follower whose last fetch reached the high watermark but whose broker the
    controller fenced (dead) is not proposed; the controller would refuse it
    (INELIGIBLE_REPLICA) at every check while the high watermark does not move."""
    from types import SimpleNamespace

    from broker.logs.classic.replica_manager import ReplicaManager

    async def run() -> None:
        p = partition(tmp_path)
        lead(p, isr=(1,))
        produce(p, records(2), acks=1)
        p.read(2, 1 << 20, 2)  # 2 and 3 have caught up
        p.read(2, 1 << 20, 3)
        asked: list[tuple[int, ...]] = []

        async def alter_isr(_p: Any, change: Any) -> None:
            asked.append(change.new_isr)

        alive = {1, 2}
        manager = SimpleNamespace(
            _classic={TOPIC_ID},
            _tasks=[],
            broker=SimpleNamespace(controller=object()),
            image=lambda: SimpleNamespace(alive_brokers=lambda: alive),
            _alter_isr=alter_isr,
        )
        ReplicaManager.check_isr(manager, p)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert asked == [(1, 2)]

    asyncio.run(run())
