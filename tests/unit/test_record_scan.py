"""Record timestamps inside (compressed) batches, for ListOffsets by timestamp."""

from __future__ import annotations

import struct

import cramjam
import pytest

from protocol.record_scan import first_at_or_after, max_timestamp_record, record_timestamps
from tests.e2e._batches import Record, encode_record

BASE = 1_700_000_000_000
# Not monotonic on purpose: Kafka allows producer timestamps in any order.
DELTAS = [0, 1000, 3000, 2000, 5000, 4000]


def _xerial(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


CODECS = {
    0: lambda d: d,
    1: lambda d: bytes(cramjam.gzip.compress(d)),
    2: _xerial,
    3: lambda d: bytes(cramjam.lz4.compress(d)),
    4: lambda d: bytes(cramjam.zstd.compress(d)),
}


def _batch(codec: int, log_append_time: bool = False) -> bytes:
    payload = b"".join(
        encode_record(Record(b"k", f"v{i}".encode()), i, delta) for i, delta in enumerate(DELTAS)
    )
    attributes = codec | (0x08 if log_append_time else 0)
    header = struct.pack(
        ">qiibIhiqqqhii",
        0,
        0,
        -1,
        2,
        0,
        attributes,
        len(DELTAS) - 1,
        BASE,
        BASE + max(DELTAS),
        -1,
        -1,
        -1,
        len(DELTAS),
    )
    return header + CODECS[codec](payload)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_timestamps_of_every_codec(codec: int) -> None:
    batch = _batch(codec)
    assert record_timestamps(batch) == [(i, BASE + d) for i, d in enumerate(DELTAS)]
    assert first_at_or_after(batch, BASE + 1500) == (2, BASE + 3000)
    assert first_at_or_after(batch, BASE + 3000) == (2, BASE + 3000)
    assert first_at_or_after(batch, BASE + 9000) is None
    assert max_timestamp_record(batch) == (4, BASE + 5000)


def test_raw_snappy_without_xerial_framing() -> None:
    payload = encode_record(Record(b"k", b"v"), 0, 7)
    header = struct.pack(">qiibIhiqqqhii", 0, 0, -1, 2, 0, 2, 0, BASE, BASE + 7, -1, -1, -1, 1)
    batch = header + bytes(cramjam.snappy.compress_raw(payload))
    assert record_timestamps(batch) == [(0, BASE + 7)]


def test_log_append_time_batches_use_the_batch_time() -> None:
    batch = _batch(0, log_append_time=True)
    assert first_at_or_after(batch, BASE + 4999) == (0, BASE + 5000)
