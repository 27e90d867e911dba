"""PostgreSQL and SQLite answer alike, operation by operation, on random workloads.

The contract suite pins the rules down case by case; this drives both backends through
the same random sequence (idempotent producers retrying, skipping, fencing and wrapping
sequences; deletions, retention, fetches with tight budgets, topic deletion) and
compares every answer. The SQLite backend is the executable specification here.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from storage.coordinator import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchCoordinator,
    BatchToCommit,
    FindRequest,
    ListOffsetsRequest,
    RetentionPolicy,
)
from storage.coordinator.postgres import PostgresCoordinator
from storage.coordinator.sqlite import SqliteCoordinator
from storage.partition_key import PartitionKey

TOPICS = [UUID(int=1), UUID(int=2), UUID(int=3)]  # the third is never created
PARTITIONS = 3
INT32_MAX = 2**31 - 1
T0 = 1_700_000_000_000


class Workload:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = T0
        self.keys = itertools.count()
        # What each producer sent last per partition, to make retries and successors.
        self.sent: dict[tuple[int, PartitionKey], list[tuple[int, int, int]]] = {}
        self.epochs = {pid: 0 for pid in (100, 101, 102)}

    def partition(self) -> PartitionKey:
        # Mostly existing logs; now and then an unknown topic or partition.
        rng = self.rng
        topic = TOPICS[2] if rng.random() < 0.08 else rng.choice(TOPICS[:2])
        return PartitionKey(topic, PARTITIONS if rng.random() < 0.05 else rng.randrange(PARTITIONS))

    def batch(self) -> BatchToCommit:
        rng = self.rng
        k = self.partition()
        count = rng.choice([1, 1, 2, 3, 5])
        ts_type = rng.choice([0, 0, 1])
        base: dict[str, Any] = dict(
            topic_id=k.topic_id,
            partition=k.partition,
            byte_offset=rng.randrange(10_000),
            byte_size=rng.choice([10, 50, 100, 400]),
            record_count=count,
            max_timestamp=self.now - rng.randrange(20_000),
            timestamp_type=ts_type,
        )
        if rng.random() < 0.3:
            return BatchToCommit(**base)
        pid = rng.choice(list(self.epochs))
        history = self.sent.setdefault((pid, k), [])
        epoch = self.epochs[pid]
        choice = rng.random()
        if history and choice < 0.2:
            epoch, seq, count = rng.choice(history[-7:])  # a retry, maybe too old
        elif choice < 0.25:
            self.epochs[pid] += 1  # bump; usually restarting at 0
            epoch, seq = self.epochs[pid], rng.choice([0, 0, 0, 3])
        elif choice < 0.3:
            epoch, seq = max(0, epoch - 1), 0  # fenced
        elif choice < 0.35:
            seq = rng.choice([INT32_MAX - 1, INT32_MAX, INT32_MAX + 1, 7])  # wrap / jump
        else:
            last = history[-1] if history else None
            if last is None or last[0] != epoch:
                seq = 0 if last is None or rng.random() < 0.8 else rng.randrange(100)
            else:
                seq = last[1] + last[2]
                if seq > INT32_MAX:
                    seq -= INT32_MAX + 1
                if rng.random() < 0.1:
                    seq += 1  # a gap
        history.append((epoch, seq, count))
        base["record_count"] = count
        return BatchToCommit(**base, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    def operation(self) -> tuple[str, tuple[Any, ...]]:
        rng = self.rng
        self.now += rng.randrange(1, 2000)
        roll = rng.random()
        if roll < 0.45:
            key = f"o/{next(self.keys)}"
            if rng.random() < 0.02 and key != "o/0":
                key = "o/0"  # a duplicate object key: both must refuse it
            batches = [self.batch() for _ in range(rng.randint(0, 8))]
            return "commit_file", (key, 1000, 1, batches, self.now)
        if roll < 0.65:
            requests = [
                FindRequest(
                    k.topic_id, k.partition, rng.randrange(-2, 40), rng.choice([1, 150, 600])
                )
                for k in (self.partition() for _ in range(rng.randint(1, 5)))
            ]
            return "find_batches", (requests, rng.choice([1, 200, 1000, 1 << 40]))
        if roll < 0.72:
            ts = [EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, -4, -7, 0]
            ts += [self.now - rng.randrange(30_000) for _ in range(3)]
            requests = [
                ListOffsetsRequest(k.topic_id, k.partition, rng.choice(ts))
                for k in (self.partition() for _ in range(rng.randint(1, 4)))
            ]
            return "list_offsets", (requests,)
        if roll < 0.78:
            return "log_info", ([self.partition() for _ in range(4)],)
        if roll < 0.84:
            requests = [(self.partition(), rng.randrange(-1, 60)) for _ in range(rng.randint(1, 3))]
            return "delete_records", (requests, self.now)
        if roll < 0.9:
            policies = [
                RetentionPolicy(
                    k.topic_id,
                    k.partition,
                    rng.choice([-1, 5000, 20_000]),
                    rng.choice([-1, 0, 300]),
                )
                for k in (self.partition() for _ in range(rng.randint(1, 3)))
            ]
            return "enforce_retention", (policies, self.now)
        if roll < 0.94:
            return "files_to_delete", (self.now - rng.randrange(5000), rng.choice([1, 3, 100]))
        if roll < 0.965:
            keys = [f"o/{rng.randrange(next(self.keys) + 1)}" for _ in range(3)]
            return "forget_files", (keys,)
        if roll < 0.98:
            return "delete_logs", ([rng.choice(TOPICS[:2])], self.now)
        return "create_logs", ([PartitionKey(t, p) for t in TOPICS[:2] for p in range(PARTITIONS)],)


async def outcome(c: BatchCoordinator, name: str, args: tuple[Any, ...]) -> Any:
    try:
        return await getattr(c, name)(*args)
    except Exception:
        return ("raised", name)  # which exception differs by backend; that one did is what counts


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_postgres_answers_like_sqlite(seed: int, tmp_path: Path, postgres_dsn: str) -> None:
    sqlite = SqliteCoordinator(str(tmp_path / "c.db"))
    postgres = PostgresCoordinator(postgres_dsn)
    await sqlite.start()
    await postgres.start()
    try:
        logs = [PartitionKey(t, p) for t in TOPICS[:2] for p in range(PARTITIONS)]
        await sqlite.create_logs(logs)
        await postgres.create_logs(logs)
        workload = Workload(seed)
        for step in range(400):
            name, args = workload.operation()
            expected = await outcome(sqlite, name, args)
            got = await outcome(postgres, name, args)
            assert got == expected, (step, name, args)
    finally:
        await sqlite.close()
        await postgres.close()
