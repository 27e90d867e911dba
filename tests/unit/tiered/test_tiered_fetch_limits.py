"""Fetch's size limits on reads below the local log (remote segments), as on the local log:
one answer of at most max_bytes, only the first batch of the first partition that returns
data may be larger (Kafka's minOneMessage)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.logs.classic.classic_log import ClassicSlot
from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.remote_view import RemoteView
from broker.logs.fetch_slots import FetchBudget
from broker.logs.tiered.tiered_read import read_tiered
from controller.image import PartitionState
from storage.classic.log import Log
from storage.tiered.copier import history_of
from storage.tiered.lineage import lineage
from storage.tiered.reader import RemoteReader
from tests.e2e._batches import Record, build_batch
from tests.fixtures.tiered_env import NOW, TOPIC, Env

from .test_broker_tiering import TIERED
from .test_copier_reader import append

BIG = 900 * 1024
MAX_BYTES = 1_000_000


async def tiered_partition(tiered_storage: Env, tmp: Path, index: int) -> ClassicPartition:
    """A leader whose two first batches (900 KiB, one per segment) are only in remote
    segments; the third, in its active segment, is local."""
    log = Log(str(tmp / f"tiered-{index}"), TIERED)
    for _ in range(3):
        append(log, build_batch([Record(b"k", os.urandom(BIG))], base_timestamp_ms=NOW), 1)
    p = ClassicPartition(TOPIC, "t", index, log, 1, lag_max_ms=1000)
    p.apply(PartitionState((1, 2), (1, 2), 1, 1, 1), lambda _p: None)
    p.read(log.log_end_offset, 1 << 20, 2)  # the follower has everything: HW at the end
    copied = await tiered_storage.copier.copy_rolled(log, TOPIC, index, 1, log.log_end_offset)
    log.enforce_retention(copied[-1].end_offset + 1)
    assert log.log_start_offset == 2
    segments = await tiered_storage.meta.list_segments(TOPIC, index)
    p.remote = RemoteView(lineage(history_of(log), segments, 0, 1), 0)
    assert p.is_remote(0) and p.is_remote(1)
    return p


def slots(
    partitions: list[ClassicPartition], offsets: list[int], max_bytes: int
) -> list[ClassicSlot]:
    out = []
    for p, offset in zip(partitions, offsets, strict=True):
        slot = ClassicSlot("t", p.index)
        slot.classic, slot.offset, slot.max_bytes = p, offset, max_bytes
        out.append(slot)
    return out


async def test_remote_reads_share_the_answer_s_limit(tiered_storage: Env, tmp_path: Path) -> None:
    partitions = [await tiered_partition(tiered_storage, tmp_path, i) for i in range(3)]
    broker: Any = SimpleNamespace(
        classic=SimpleNamespace(tiering=SimpleNamespace(reader=RemoteReader(tiered_storage.store)))
    )
    try:
        one = len(partitions[0].log.read(2, 1))  # every batch is as large as the local one

        # The first partition's first batch, nothing else: a second one would pass 1 MB.
        read = slots(partitions, [0, 0, 0], 20_000_000)
        budget = FetchBudget(MAX_BYTES)
        assert await read_tiered(broker, read, budget) == one
        assert [len(s.data) for s in read] == [one, 0, 0]
        assert [s.error for s in read] == [0, 0, 0]
        assert (budget.left, budget.min_one) == (MAX_BYTES - one, False)

        # The first partition with data goes first whatever its partition limit; the
        # others get nothing past it, even when their own limit would allow it.
        read = slots(partitions, [1, 0, 0], 1000)
        assert await read_tiered(broker, read, FetchBudget(MAX_BYTES)) == one
        assert [len(s.data) for s in read] == [one, 0, 0]

        # A budget already used by another partition of the request: nothing remote.
        budget = FetchBudget(MAX_BYTES)
        budget.take(one)
        read = slots(partitions, [0, 0, 0], 20_000_000)
        assert await read_tiered(broker, read, budget) == 0
        assert [len(s.data) for s in read] == [0, 0, 0]
    finally:
        for p in partitions:
            p.log.close()
