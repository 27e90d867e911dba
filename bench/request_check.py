"""Cost of the decode-time bounds check (protocol/request_check.py) on the hot path.

    .venv/bin/python -m bench.request_check

Typical Produce (1 and 50 partitions of 1 KiB record data, v3 as kafka-python 2 sends and
v9 as kafka-python 3 sends) and Fetch (v12 and v16, 6 partitions) request bodies: µs per
check, next to kio's native decode of the same bytes measured in the same run, which every
request pays anyway. Medians of 5 runs.
"""

from __future__ import annotations

import io
import statistics
import timeit
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from protocol.build import build
from protocol.request_check import check_body

RUNS = 5
NUMBER = 2000
RECORD_DATA = b"x" * 1024


def _encode(schema: type, data: dict[str, Any]) -> memoryview:
    out = io.BytesIO()
    entity_writer(schema)(out, build(schema, data))
    return memoryview(out.getvalue())


def _produce(version: int, partitions: int) -> tuple[type, memoryview]:
    schema = load_request_schema(0, version)
    parts = [{"index": i, "records": RECORD_DATA} for i in range(partitions)]
    body = {
        "acks": -1,
        "timeout": 30000,
        "topic_data": [{"name": "orders", "partition_data": parts}],
    }
    return schema, _encode(schema, body)


def _fetch(version: int) -> tuple[type, memoryview]:
    schema = load_request_schema(1, version)
    partition = {
        "current_leader_epoch": -1,
        "fetch_offset": 1000,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    topic: dict[str, Any] = {"partitions": [{"partition": i, **partition} for i in range(6)]}
    topic["topic" if version < 13 else "topic_id"] = (
        "orders" if version < 13 else "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    )
    body = {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [topic],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return schema, _encode(schema, body)


def _us(fn: Any) -> float:
    per_run = [min(timeit.repeat(fn, number=NUMBER, repeat=3)) / NUMBER * 1e6 for _ in range(RUNS)]
    return statistics.median(per_run)


def main() -> None:
    cases = {
        "Produce v3, 1 partition": _produce(3, 1),
        "Produce v3, 50 partitions": _produce(3, 50),
        "Produce v9, 1 partition": _produce(9, 1),
        "Produce v9, 50 partitions": _produce(9, 50),
        "Fetch v12, 6 partitions": _fetch(12),
        "Fetch v16, 6 partitions": _fetch(16),
    }
    print(f"{'request':28} {'bytes':>7} {'check µs':>9} {'kio decode µs':>14} {'ratio':>6}")
    for name, (schema, body) in cases.items():
        check_body(schema, body, 0)  # compile outside the timing
        reader = entity_reader(schema)
        check = _us(lambda s=schema, b=body: check_body(s, b, 0))
        native = _us(lambda r=reader, b=body: r(b, 0))
        print(f"{name:28} {len(body):7} {check:9.2f} {native:14.2f} {check / native:6.2f}")


if __name__ == "__main__":
    main()
