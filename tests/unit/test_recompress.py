"""Broker-side recompression of produced batches (compression.type)."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from broker.produce.recompress import Target, recompress
from protocol.compression import GZIP, LZ4, NONE, ZSTD
from protocol.records import InvalidRecords, parse_batches


def _batch(codec: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=7,
        producer_epoch=1,
        base_sequence=3,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _read(blob: bytes) -> list[tuple[int, int, list[bytes]]]:
    records = MemoryRecords(blob)
    out = []
    while (batch := records.next_batch()) is not None:
        out.append((batch.compression_type, batch.producer_id, [r.value for r in batch]))
    return out


def test_every_batch_ends_in_the_topic_codec() -> None:
    first, second = [b"a" * 300, b"b"], [b"c" * 50]
    blob = _batch(LZ4, first) + _batch(ZSTD, second) + _batch(NONE, [b"d"])
    batches = parse_batches(blob, 1 << 20)
    out, headers = recompress(memoryview(blob), batches, Target(GZIP, 5), 1 << 20, 1 << 20)
    # The result passes the broker's own checks (lengths, CRC) and reads back alike.
    assert parse_batches(out, 1 << 20) == headers
    assert _read(bytes(out)) == [(GZIP, 7, first), (GZIP, 7, second), (GZIP, 7, [b"d"])]
    assert [h.record_count for h in headers] == [2, 1, 1]


def test_nothing_to_do_keeps_the_original() -> None:
    blob = memoryview(_batch(ZSTD, [b"x"]))
    batches = parse_batches(blob, 1 << 20)
    assert recompress(blob, batches, Target(ZSTD, None), 1 << 20, 1 << 20) == (blob, batches)


def test_bombs_and_oversized_results_are_refused() -> None:
    blob = _batch(ZSTD, [b"\0" * (4 << 20)])
    batches = parse_batches(blob, 1 << 20)
    with pytest.raises(InvalidRecords, match="decompresses too large"):
        recompress(memoryview(blob), batches, Target(NONE, None), 64 << 20, 1 << 20)
    with pytest.raises(InvalidRecords, match=r"max\.message\.bytes"):
        recompress(memoryview(blob), batches, Target(NONE, None), 1 << 20, 8 << 20)
