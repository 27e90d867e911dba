"""Transactions on a classic partition: the open transactions' first offsets (LSO) and the
aborted index, kept by the leader as it appends data and markers, by a follower from the
copied batches, rebuilt when the log is opened again and after a truncation; hostile control
batches never raise."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from broker.logs.classic.classic_log import begin_verification, classic_append
from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.txn_verification import verify_transaction
from protocol.control_batch import marker_batch
from protocol.records import TRANSACTIONAL_BIT, parse_batches
from storage.catalog import Topic
from storage.classic.batches import walk
from storage.classic.log import Log, LogConfig
from storage.classic.txn_index import (
    ABORT,
    COMMIT,
    NOT_A_MARKER,
    AbortedTxn,
    TxnIndex,
    marker_coordinator_epoch,
    marker_type,
)
from storage.partition_key import PartitionKey
from tests.e2e._batches import Record, build_raw_batch, encode_record

from .test_partition import TOPIC_ID, lead, produce, records

PID = 42


def txn_records(n: int, seq: int, pid: int = PID, epoch: int = 0) -> bytes:
    payload = b"".join(encode_record(Record(b"k", b"v%d" % i), i) for i in range(n))
    return build_raw_batch(
        payload,
        records_count=n,
        base_timestamp_ms=1_000,
        attributes=TRANSACTIONAL_BIT,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def open_partition(path: Path, me: int = 1) -> ClassicPartition:
    return ClassicPartition(TOPIC_ID, "t", 0, Log(str(path), LogConfig()), me, lag_max_ms=1000)


def replicate(p: ClassicPartition) -> None:
    for follower in (2, 3):
        p.read(p.log.log_end_offset, 1 << 20, follower)


def test_marker_type_of_markers_and_garbage() -> None:
    assert marker_type(memoryview(marker_batch(1, 0, True, 5))) == COMMIT
    assert marker_type(memoryview(marker_batch(1, 0, False, 5))) == ABORT
    batch = bytearray(marker_batch(1, 0, True, 5))
    for cut in range(61, len(batch)):
        assert marker_type(memoryview(bytes(batch[:cut]))) in (NOT_A_MARKER, COMMIT)
    batch[61:] = b"\xff" * (len(batch) - 61)
    assert marker_type(memoryview(bytes(batch))) == NOT_A_MARKER


def test_marker_coordinator_epoch_of_markers_and_garbage() -> None:
    for epoch in (0, 1, 2**31 - 1, -5):
        assert marker_coordinator_epoch(memoryview(marker_batch(1, 0, True, 5, epoch))) == epoch
    batch = marker_batch(1, 0, False, 5, 9)
    for cut in range(len(batch) - 2):  # cut before the value ends: unreadable, never raises
        assert marker_coordinator_epoch(memoryview(batch[:cut])) == -1


def test_index_lso_and_aborted_ranges() -> None:
    index = TxnIndex()
    data = TRANSACTIONAL_BIT
    control = TRANSACTIONAL_BIT | 0x20
    index.observe(data, 1, NOT_A_MARKER, 0, 4)
    index.observe(data, 2, NOT_A_MARKER, 5, 9)
    index.observe(data, 1, NOT_A_MARKER, 10, 10)  # the same transaction continues
    assert index.last_stable_offset(100) == 0
    index.observe(control, 1, ABORT, 11, 11)
    assert index.last_stable_offset(100) == 5
    index.observe(control, 2, COMMIT, 12, 12)
    assert index.last_stable_offset(100) == 100
    assert index.last_stable_offset(7) == 7
    assert index.aborted == [AbortedTxn(1, 0, 11)]
    assert index.aborted_between(0, 100) == [AbortedTxn(1, 0, 11)]
    assert index.aborted_between(12, 100) == []
    index.drop_before(12)
    assert index.aborted == []


def test_leader_follower_and_reopened_log_agree(tmp_path: Path) -> None:
    async def run() -> None:
        p = open_partition(tmp_path / "leader")
        lead(p)
        produce(p, records(2))  # offsets 0-1, not transactional
        produce(p, txn_records(3, 0))  # 2-4
        replicate(p)
        assert p.high_watermark == 5 and p.last_stable_offset == 2
        # read_committed stops before the open transaction; read_uncommitted does not.
        _, data = p.read(0, 1 << 20, -1, read_committed=True)
        assert [b.base_offset for b in walk(data)] == [0]
        marker = p.append_marker(PID, 0, False, 0)
        assert isinstance(marker, asyncio.Future) and not marker.done()
        replicate(p)
        assert (await marker).error == 0
        assert p.last_stable_offset == 6
        assert p.txns.aborted == [AbortedTxn(PID, 2, 5)]
        produce(p, txn_records(1, 3))  # 6: the next transaction of the producer
        p.append_marker(PID, 0, True, 0)  # 7
        replicate(p)
        assert p.last_stable_offset == p.high_watermark == 8
        # A zombie's marker of an older epoch is refused.
        p.append_marker(PID, 1, False, 0)  # 8: a coordinator abort bumps to epoch 1
        replicate(p)
        assert p.append_marker(PID, 0, True, 0).error != 0  # type: ignore[union-attr]
        assert produce(p, txn_records(1, 4)).error != 0  # type: ignore[union-attr]

        follower = open_partition(tmp_path / "follower", me=2)
        follower.append_fetched(p.log.read(0, 1 << 20), p.high_watermark, 0)
        assert follower.txns == p.txns
        p.close()
        again = open_partition(tmp_path / "leader")
        assert again.txns == p.txns
        assert again.producers.epoch_of(PID) == 1
        # A truncation back into the aborted transaction reopens it.
        follower.truncate(5)
        assert follower.txns.ongoing == {PID: 2} and follower.txns.aborted == []
        follower.close()
        again.close()

    asyncio.run(run())


def test_first_transactional_batch_is_verified_kip_890(tmp_path: Path) -> None:

    async def run() -> None:
        p = open_partition(tmp_path / "p")
        lead(p)
        topic = Topic("t", TOPIC_ID, 1, {})
        answers: dict[str, tuple[int, set[PartitionKey]]] = {}

        async def verify(tid: str, pid: int, epoch: int) -> tuple[int, set[PartitionKey]]:
            return answers[tid]

        broker = SimpleNamespace(
            transactions=SimpleNamespace(verify=verify),
            watch=SimpleNamespace(notify=lambda _changes: None),
        )
        manager = SimpleNamespace(broker=broker, leader_partition=lambda _tid, _i: (p, 0))

        async def append(tid: str | None, seq: int) -> int:
            data = memoryview(txn_records(1, seq))
            batches = parse_batches(data, 1 << 20)
            assert begin_verification(manager, topic, 0, batches)  # type: ignore[arg-type]
            verified = await verify_transaction(broker.transactions, tid, batches[0])  # type: ignore[arg-type]
            if refusal := verified.refusal(TOPIC_ID, 0):
                return refusal
            result = classic_append(
                manager,  # type: ignore[arg-type]
                topic,
                0,
                data,
                batches,
                False,
                1,
                5000,
            )
            assert not isinstance(result, asyncio.Future)
            return result.error

        answers["late"] = (0, set())  # its transaction does not hold the partition
        assert await append("late", 0) == ErrorCode.invalid_txn_state
        answers["fenced"] = (int(ErrorCode.producer_fenced), set())
        assert await append("fenced", 0) == ErrorCode.invalid_producer_epoch
        assert await append(None, 0) == ErrorCode.invalid_txn_state
        assert p.log.log_end_offset == 0 and not p.txns.ongoing
        answers["ok"] = (0, {PartitionKey(TOPIC_ID, 0)})
        assert await append("ok", 0) == 0
        assert p.txns.ongoing == {PID: 0}
        # The transaction is open here now: later batches need no check.
        later = memoryview(txn_records(1, 1))
        assert not begin_verification(manager, topic, 0, parse_batches(later, 1 << 20))  # type: ignore[arg-type]
        p.close()

    asyncio.run(run())


def test_a_late_copy_of_an_earlier_transactions_marker_ends_nothing(tmp_path: Path) -> None:
    """The nemesis found a committed transaction partly aborted: transaction 12's ABORT
    marker reached the leader a second time (its first request waited on a connection
    the coordinator gave up on and re-sent on another) after transaction 13's first
    records, and aborted them; 13's COMMIT then had nothing left to commit there. Markers
    carry their transaction's number (the coordinator epoch field): a lower one than the
    producer's last marker here is refused, the same one answered without a new marker,
    in the leader, a follower and a reopened log alike."""

    async def run() -> None:
        p = open_partition(tmp_path / "leader")
        lead(p)
        produce(p, txn_records(2, 0))  # 0-1: transaction 12
        first = p.append_marker(PID, 0, False, 12)  # 2: its ABORT
        replicate(p)
        assert (await first).error == 0  # type: ignore[misc]
        produce(p, txn_records(3, 2))  # 3-5: transaction 13
        replicate(p)
        assert p.last_stable_offset == 3

        # The same marker again: nothing appended, answered as the first was.
        again = p.append_marker(PID, 0, False, 12)
        assert not isinstance(again, asyncio.Future)
        assert (again.error, again.base_offset) == (0, 2)
        assert p.log.log_end_offset == 6 and p.txns.ongoing == {PID: 3}
        # An older transaction's: refused as Kafka refuses an older coordinator epoch.
        stale = p.append_marker(PID, 0, False, 11)
        assert not isinstance(stale, asyncio.Future)
        assert stale.error == ErrorCode.transaction_coordinator_fenced
        assert p.log.log_end_offset == 6 and p.last_stable_offset == 3

        commit = p.append_marker(PID, 0, True, 13)  # 6: transaction 13 commits
        replicate(p)
        assert (await commit).error == 0  # type: ignore[misc]
        assert p.txns.aborted == [AbortedTxn(PID, 0, 2)]
        assert p.last_stable_offset == p.high_watermark == 7

        # A follower learns the numbers from the markers it copies, and a reopened log
        # from the markers it holds: a new leader refuses the same late copy.
        follower = open_partition(tmp_path / "follower", me=2)
        follower.append_fetched(p.log.read(0, 1 << 20), p.high_watermark, 0)
        p.close()
        reopened = open_partition(tmp_path / "leader")
        for replica in (follower, reopened):
            assert replica.producers.last_marker(PID) == (13, 6)
            lead(replica)
            late = replica.append_marker(PID, 0, False, 12)
            assert not isinstance(late, asyncio.Future)
            assert late.error == ErrorCode.transaction_coordinator_fenced
            assert replica.log.log_end_offset == 7
            replica.close()

    asyncio.run(run())


def test_unnumbered_markers_are_written_as_before(tmp_path: Path) -> None:
    """Coordinator epoch 0 (a broker from before markers were numbered, during a rolling
    upgrade): written as before, never refused, so no transaction is left open."""

    async def run() -> None:
        p = open_partition(tmp_path / "p")
        lead(p)
        produce(p, txn_records(1, 0))
        p.append_marker(PID, 0, True, 5)
        produce(p, txn_records(1, 1))
        p.append_marker(PID, 0, False, 0)
        replicate(p)
        assert p.log.log_end_offset == 4 and p.txns.aborted == [AbortedTxn(PID, 2, 3)]
        assert p.last_stable_offset == p.high_watermark == 4
        p.close()

    asyncio.run(run())


def test_transaction_numbers_wrap_and_compare_as_serial_numbers() -> None:
    """The coordinator epoch is an int32: a busy id's completion count passes 2**31 (25 days
    at 1000 transactions a second); the numbers wrap and a wrapped one is still newer."""
    from broker.logs.classic.producer_state import MARKER_NUMBERS, marker_behind, marker_number

    assert marker_number(1) == 1 and marker_number(MARKER_NUMBERS) == MARKER_NUMBERS
    assert marker_number(MARKER_NUMBERS + 1) == 1  # wrapped, never 0 (unnumbered)
    assert marker_behind(5, 5) == 0
    assert marker_behind(4, 5) == 1  # a late copy of the one before
    assert marker_behind(6, 5) == -1  # the next transaction
    assert marker_behind(1, MARKER_NUMBERS) == -1  # the next one, after the wrap
    assert marker_behind(MARKER_NUMBERS, 1) == 1  # the one before, across the wrap


def test_a_reused_sequence_of_an_aborted_batch_blocks_the_rest_of_the_transaction(
    tmp_path: Path,
) -> None:
    """The nemesis found a committed transaction missing records: librdkafka aborted a
    transaction while a record's request had failed in transport (outcome unknown), purged
    that record and gave its sequence to the next transaction's first record. The leader
    had written the purged one, so the new record was answered as its duplicate (as Kafka
    answers), and the rest of the new transaction was appended and committed without it.
    Kafka's verification (KIP-890) remembers the lowest sequence seen while a transaction
    is being verified in a partition and refuses higher ones until a batch of it is
    appended there: the producer learns of the gap (OUT_OF_ORDER_SEQUENCE_NUMBER, an
    abortable error) instead of committing without the record."""

    p = open_partition(tmp_path / "p")
    lead(p)
    topic = Topic("t", TOPIC_ID, 1, {})
    manager = SimpleNamespace(
        broker=SimpleNamespace(watch=SimpleNamespace(notify=lambda _changes: None)),
        leader_partition=lambda _tid, _i: (p, 0),
    )

    def append(seq: int, n: int = 1, verify: bool = True) -> tuple[int, int]:
        data = memoryview(txn_records(n, seq))
        batches = parse_batches(data, 1 << 20)
        assert begin_verification(manager, topic, 0, batches) is verify  # type: ignore[arg-type]
        result = classic_append(
            manager,
            topic,
            0,
            data,
            batches,
            False,
            1,
            5000,  # type: ignore[arg-type]
        )
        assert not isinstance(result, asyncio.Future)
        return result.error, result.base_offset

    async def run() -> None:
        assert append(0) == (0, 0)  # the first transaction's record (seq 0)
        marked = p.append_marker(PID, 0, False, 1)  # aborted
        replicate(p)
        assert (await marked if isinstance(marked, asyncio.Future) else marked).error == 0
        # The next transaction: its first record reuses seq 0, answered as the duplicate
        # of the aborted one (Kafka answers the same) ...
        assert append(0) == (0, 0)
        # ... and its next record is refused: seq 0 was seen first, so seq 1 may not be
        # the transaction's first batch here.
        assert append(1) == (ErrorCode.out_of_order_sequence_number, -1)
        assert p.log.log_end_offset == 2 and not p.txns.ongoing
        # A lower sequence in a new verification lowers the bar; a write of it ends the
        # verification, and the transaction goes on with the next sequences.
        p.producers.forget(PID)
        p.producers.update(PID, 0, 9, 1, 1)  # the producer's last sequence is 9
        assert append(12) == (ErrorCode.out_of_order_sequence_number, -1)
        assert append(11) == (ErrorCode.out_of_order_sequence_number, -1)
        assert append(10) == (0, 2)
        assert p.producers.verifying_lowest(PID) is None
        assert append(11, verify=False) == (0, 3)

    asyncio.run(run())
    p.close()


def test_a_verification_ends_with_a_marker_or_a_copied_transactional_batch(
    tmp_path: Path,
) -> None:
    p = open_partition(tmp_path / "p")
    p.producers.begin_verification(PID, 5, 0, 0.0)
    p.producers.begin_verification(PID, 7, 0, 1.0)  # higher: the lowest stays
    assert p.producers.verifying_lowest(PID) == 5
    p.producers.begin_verification(PID, 9, 1, 2.0)  # a newer epoch starts again
    assert p.producers.verifying_lowest(PID) == 9
    p.producers.begin_verification(PID, 3, 1, 2.0 + 86_400_000)  # expired: begins anew
    assert p.producers.verifying_lowest(PID) == 3
    # A follower copying the transaction's batch from its leader clears it, as Kafka does.
    p.append_fetched(txn_records(1, 3, epoch=1), 0, 0)
    assert p.producers.verifying_lowest(PID) is None
    p.close()


def test_a_marker_ends_a_verification(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    p.producers.begin_verification(PID, 5, 0, 0.0)

    async def run() -> None:
        marked = p.append_marker(PID, 0, False, 1)
        replicate(p)
        assert (await marked if isinstance(marked, asyncio.Future) else marked).error == 0

    asyncio.run(run())
    assert p.producers.verifying_lowest(PID) is None
    p.close()


def test_verifications_a_partition_remembers_are_bounded(tmp_path: Path) -> None:
    """They begin before the coordinator is asked: made-up producer ids must not grow them
    without bound; the oldest goes first."""
    from broker.logs.classic.producer_state import VERIFICATIONS_MAX, ProducerState

    state = ProducerState()
    for pid in range(VERIFICATIONS_MAX + 5):
        state.begin_verification(pid, 0, 0, 0.0)
    assert len(state._verifying) == VERIFICATIONS_MAX
    assert state.verifying_lowest(0) is None and state.verifying_lowest(VERIFICATIONS_MAX + 4) == 0
