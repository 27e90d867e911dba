"""Decoding and rewriting record batches (no Spark): every codec, control batches and
aborted transactions, compaction's offset-preserving filter."""

from __future__ import annotations

import struct

import pytest

from jobs.decode import (
    ABORT,
    COMMIT,
    CommittedFilter,
    CorruptBatch,
    decode_batch,
    filter_batch,
    record_offsets,
)
from protocol.compression import compress
from protocol.records import parse_batches
from tests.e2e._batches import Record, encode_record

BASE_TS = 1_700_000_000_000
CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy (xerial), lz4, zstd


def make_batch(
    records: list[Record],
    *,
    codec: int = 0,
    deltas: list[int] | None = None,
    producer_id: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    import crc32c

    deltas = deltas if deltas is not None else list(range(len(records)))
    # Record i gets offset delta deltas[i] and timestamp delta deltas[i].
    payload = b"".join(encode_record(r, d, d) for r, d in zip(records, deltas, strict=True))
    attributes = (
        codec
        | (0x08 if log_append_time is not None else 0)
        | (0x10 if transactional else 0)
        | (0x20 if control else 0)
    )
    lod = last_offset_delta if last_offset_delta is not None else deltas[-1]
    max_ts = log_append_time if log_append_time is not None else BASE_TS + max(deltas)
    after_crc = struct.pack(
        ">hiqqqhii", attributes, lod, BASE_TS, max_ts, producer_id, 0, 0, len(records)
    ) + compress(codec, payload)
    # Stored batches keep the producer's baseOffset (0): the coordinator knows the real one.
    return struct.pack(">qiibI", 0, len(after_crc) + 9, -1, 2, crc32c.crc32c(after_crc)) + after_crc


def control(kind: int, producer_id: int) -> bytes:
    rec = Record(struct.pack(">hh", 0, kind), b"\x00\x00\x00\x00\x00\x00")
    return make_batch([rec], producer_id=producer_id, transactional=True, control=True)


RECORDS = [
    Record(b"k1", b"v1", (("h", b"x"), ("h", None))),
    Record(None, b"no key"),
    Record(b"k2", None),  # tombstone
    Record(b"", b""),
    Record(b"bin\x00", bytes(range(256)) * 50),
]


@pytest.mark.parametrize("codec", CODECS)
def test_decode_every_codec(codec: int) -> None:
    d = decode_batch(make_batch(RECORDS, codec=codec), "t", 3, 1000)
    assert d.control is None and not d.transactional
    cols = d.columns
    assert cols is not None
    assert cols.offset == [1000, 1001, 1002, 1003, 1004]
    assert cols.timestamp == [BASE_TS + i for i in range(5)]
    assert cols.key == [r.key for r in RECORDS]
    assert cols.value == [r.value for r in RECORDS]
    assert cols.headers[0] == [("h", b"x"), ("h", None)]
    assert cols.headers[1:] == [[]] * 4
    assert cols.topic == ["t"] * 5 and cols.partition == [3] * 5
    assert cols.timestamp_type == [0] * 5 and cols.producer_id == [-1] * 5


def test_log_append_time_records_carry_the_batch_time() -> None:
    d = decode_batch(make_batch(RECORDS[:2], log_append_time=BASE_TS + 99), "t", 0, 0)
    assert d.columns is not None
    assert d.columns.timestamp == [BASE_TS + 99] * 2
    assert d.columns.timestamp_type == [1, 1]


def test_corrupt_batches_are_refused() -> None:
    good = bytearray(make_batch(RECORDS))
    good[-1] ^= 0xFF
    with pytest.raises(CorruptBatch):
        decode_batch(bytes(good), "t", 0, 0)
    with pytest.raises(CorruptBatch):
        decode_batch(make_batch(RECORDS)[:-3], "t", 0, 0)


def test_control_batches_and_aborted_transactions_are_skipped() -> None:
    plain = make_batch([Record(b"a", b"plain")])
    committed = make_batch([Record(b"b", b"committed")], producer_id=7, transactional=True)
    aborted = make_batch([Record(b"c", b"aborted")], producer_id=8, transactional=True)
    still_open = make_batch([Record(b"d", b"open")], producer_id=9, transactional=True)
    f = CommittedFilter()
    for i, data in enumerate(
        [plain, committed, aborted, control(COMMIT, 7), control(ABORT, 8), still_open]
    ):
        f.feed(decode_batch(data, "t", 0, i))
    assert f.out.value == [b"plain", b"committed"]
    assert f.out.offset == [0, 1]
    # The open transaction's records wait for a marker beyond what was read.
    assert list(f.pending) == [9]
    # Compaction's reads keep the aborted records apart (they are dropped).
    kept = CommittedFilter(keep_aborted=True)
    for i, data in enumerate([plain, committed, aborted, control(COMMIT, 7), control(ABORT, 8)]):
        kept.feed(decode_batch(data, "t", 0, i))
    assert kept.out.value == [b"plain", b"committed"]
    assert kept.aborted is not None and kept.aborted.value == [b"aborted"]
    assert f.aborted is None


@pytest.mark.parametrize("codec", CODECS)
def test_filter_batch_keeps_offsets_and_kafka_header_semantics(codec: int) -> None:
    original = make_batch(RECORDS, codec=codec, producer_id=5)
    out = filter_batch(original, 100, {100, 102, 103})
    assert isinstance(out, bytes)
    # A valid batch (the broker's own validation: framing, CRC, count vs lastOffsetDelta
    # is NOT required to match for compacted batches, as in Kafka).
    with pytest.raises(Exception, match="record count"):
        parse_batches(out, 1 << 30)
    assert record_offsets(out, 100) == [101, 104]
    # Base offset, lastOffsetDelta, timestamps and producer id unchanged.
    assert struct.unpack_from(">q", out, 0)[0] == 100
    assert struct.unpack_from(">iqq", out, 23) == struct.unpack_from(">iqq", original, 23)
    assert struct.unpack_from(">q", out, 43)[0] == 5
    d = decode_batch(out, "t", 0, 100)
    assert d.columns is not None
    assert d.columns.offset == [101, 104]
    assert d.columns.value == [RECORDS[1].value, RECORDS[4].value]
    assert d.columns.timestamp == [BASE_TS + 1, BASE_TS + 4]


def test_filter_batch_unchanged_and_emptied() -> None:
    original = make_batch(RECORDS)
    assert filter_batch(original, 0, set()) is original
    assert filter_batch(original, 0, {99}) is original
    assert filter_batch(original, 0, set(range(5))) is None
    ctl = control(COMMIT, 1)
    assert filter_batch(ctl, 0, {0}) is ctl  # control batches stay whole
