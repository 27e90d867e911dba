"""The executor side of reading, on the embedded storage (SQLite + local directory), no
Spark: transaction markers found past a task's end and in the gaps between its batches,
the last stable offset as the end of a read, and objects rewritten and deleted between the
plan and the read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.config import BrokerConfig, load_config
from jobs import read, runtime
from jobs.decode import ABORT, COMMIT
from jobs.plan import ReadTask, Selection, read_tasks, snapshot, task_for
from jobs.read import decode_task, decode_task_with_aborted
from storage.catalog import Topic
from storage.coordinator import BatchReplacement, BatchToCommit, NewBatch, ReplacedBatch
from storage.partition_key import PartitionKey

from .test_decode import Record, control, make_batch

NOW = 1_700_000_000_000


@pytest.fixture
def config(tmp_path: Path) -> Iterator[BrokerConfig]:
    (tmp_path / "data").mkdir()
    cfg = load_config({"data.dir": str(tmp_path / "data")})
    yield cfg
    runtime.close_all()


def put_and_commit(cfg: BrokerConfig, topic: Topic, batches: list[bytes]) -> str:
    async def go() -> str:
        store = await runtime.store(cfg)
        coordinator = await runtime.coordinator(cfg)
        key = uuid.uuid4().hex
        await store.put(key, batches)
        commits, pos = [], 0
        for data in batches:
            count = int.from_bytes(data[23:27], "big") + 1  # lastOffsetDelta + 1
            commits.append(BatchToCommit(topic.topic_id, 0, pos, len(data), count, NOW, 0))
            pos += len(data)
        results = await coordinator.commit_file(key, pos, 1, commits, NOW)
        assert all(r.error == 0 for r in results)
        return key

    return runtime.run(go())


def new_topic(cfg: BrokerConfig) -> Topic:
    topic = Topic(f"t-{uuid.uuid4().hex[:6]}", uuid.uuid4(), 1)

    async def go() -> None:
        await (await runtime.catalog(cfg)).create_topic(topic)
        await (await runtime.coordinator(cfg)).create_logs([PartitionKey(topic.topic_id, 0)])

    runtime.run(go())
    return topic


def values(cfg: BrokerConfig, task: ReadTask) -> list[tuple[int, bytes | None]]:
    out = []
    for _t, _p, cols in decode_task(cfg, task, Selection()):
        out += list(zip(cols.offset, cols.value, strict=True))
    return out


def test_markers_past_the_task_are_looked_up(config: BrokerConfig) -> None:
    topic = new_topic(config)
    put_and_commit(
        config,
        topic,
        [
            make_batch([Record(b"a", b"plain")]),  # 0
            make_batch([Record(b"b", b"txn-7")], producer_id=7, transactional=True),  # 1
            make_batch([Record(b"c", b"txn-8")], producer_id=8, transactional=True),  # 2
            make_batch([Record(b"d", b"txn-9")], producer_id=9, transactional=True),  # 3
        ],
    )
    put_and_commit(config, topic, [make_batch([Record(b"e", b"more")])])  # 4
    put_and_commit(config, topic, [control(ABORT, 8), control(COMMIT, 7)])  # 5, 6
    [snap] = snapshot(config, Selection(topics=(topic.name,)))
    first_object = [r for r in snap.refs() if r.base_offset <= 3]
    task = ReadTask(
        0, first_object, {(topic.name, 0): snap.high_watermark}, {topic.name: topic.topic_id}
    )
    # 7 committed (its marker is two objects further), 8 aborted, 9 never ended: dropped.
    assert values(config, task) == [(0, b"plain"), (1, b"txn-7")]
    whole = read_tasks([snap], 1)
    got = sorted(v for t in whole for v in values(config, t))
    assert got == [(0, b"plain"), (1, b"txn-7"), (4, b"more")]


def test_objects_rewritten_since_the_plan_are_read_where_they_are(config: BrokerConfig) -> None:
    topic = new_topic(config)
    key = put_and_commit(
        config,
        topic,
        [make_batch([Record(b"a", b"x"), Record(b"b", b"y")]), make_batch([Record(b"c", b"z")])],
    )
    [snap] = snapshot(config, Selection(topics=(topic.name,)))
    task = ReadTask(0, snap.refs(), {(topic.name, 0): 3}, {topic.name: topic.topic_id})

    async def merge_and_clean() -> None:
        # What a merge plus the cleaner do: copy, swap, delete the old object.
        store = await runtime.store(config)
        data = await store.get_range(key, 0, 1 << 20)
        await store.put("merged", [data])
        old = [ReplacedBatch(b.base_offset, b.last_offset, key) for b in snap.batches]
        new = [
            NewBatch(b.byte_offset, b.byte_size, b.base_offset, b.last_offset, 0, NOW, -1)
            for b in snap.batches
        ]
        coordinator = await runtime.coordinator(config)
        assert await coordinator.replace_batches(
            "merged", len(data), [BatchReplacement(topic.topic_id, 0, old, new)], NOW
        ) == [0]
        await store.delete_many([key])

    runtime.run(merge_and_clean())
    assert values(config, task) == [(0, b"x"), (1, b"y"), (2, b"z")]


@pytest.mark.parametrize("window", [1, 4096])
def test_markers_in_the_gaps_of_a_task_decide_its_transactions(
    config: BrokerConfig, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listing one offset at a time first (windows 1, 4, 16...) must find the same.
    monkeypatch.setattr(read, "MARKER_WINDOW", window)
    topic = new_topic(config)
    txn = {"producer_id": 7, "transactional": True}
    # Producer 7: a committed transaction, then an aborted one, each marker in an object
    # of its own; the task below holds the data objects only.
    first = put_and_commit(config, topic, [make_batch([Record(b"a", b"t1")], **txn)])  # 0
    put_and_commit(config, topic, [control(COMMIT, 7)])  # 1
    second = put_and_commit(config, topic, [make_batch([Record(b"a", b"t2")], **txn)])  # 2
    put_and_commit(config, topic, [make_batch([Record(b"b", b"plain")])])  # 3
    put_and_commit(config, topic, [control(ABORT, 7)])  # 4
    third = put_and_commit(config, topic, [make_batch([Record(b"a", b"t3")], **txn)])  # 5
    put_and_commit(config, topic, [control(COMMIT, 7)])  # 6
    [snap] = snapshot(config, Selection(topics=(topic.name,)))
    held = [r for r in snap.refs() if r.object_key in (first, second, third)]
    task = task_for(0, held, [snap])
    # Each record is decided by the first marker of its producer after it: in a gap of
    # the task, not by a later one the task holds or finds past its end.
    assert values(config, task) == [(0, b"t1"), (5, b"t3")]
    aborted = [
        list(zip(a.offset, a.value, strict=True))
        for *_, a in decode_task_with_aborted(config, task, keep_aborted=True)
        if a is not None
    ]
    assert aborted == [[(2, b"t2")]]


def test_nothing_at_or_past_the_last_stable_offset_is_read(config: BrokerConfig) -> None:
    topic = new_topic(config)
    put_and_commit(
        config,
        topic,
        [
            make_batch([Record(b"a", b"plain")]),  # 0
            make_batch([Record(b"b", b"open")], producer_id=7, transactional=True),  # 1
            make_batch([Record(b"c", b"after")]),  # 2
        ],
    )
    [snap] = snapshot(config, Selection(topics=(topic.name,)))
    # As the snapshot shows an open transaction starting at offset 1 (this coordinator
    # knows of none: the batches were committed without their producer's transaction).
    snap.last_stable_offset = 1
    task = task_for(0, snap.refs(), [snap])
    assert task.stable == {(topic.name, 0): 1}
    assert values(config, task) == [(0, b"plain")]
