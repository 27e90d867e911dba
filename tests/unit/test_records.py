"""Record batch header parsing, CRC checks, LogAppendTime stamping, offset patching."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kio.records.readers import read_batch  # slow Python parser: fine as an oracle in tests
from kio.schema.errors import ErrorCode

from protocol.records import (
    PATCHED_PREFIX_SIZE,
    InvalidRecords,
    parse_batches,
    patched_prefix,
    stamp_log_append_time,
)
from tests.e2e._batches import Record, build_batch

MAX = 1_000_000


def _batch(n: int = 3, **kw: int) -> bytes:
    records = [Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
    return build_batch(records, base_timestamp_ms=1_700_000_000_000, **kw)


def test_parses_consecutive_batches() -> None:
    a = _batch(3, producer_id=7, producer_epoch=1, base_sequence=10)
    b = _batch(1)
    headers = parse_batches(a + b, MAX)
    assert [(h.offset, h.size, h.record_count) for h in headers] == [
        (0, len(a), 3),
        (len(a), len(b), 1),
    ]
    assert (headers[0].producer_id, headers[0].producer_epoch, headers[0].base_sequence) == (
        7,
        1,
        10,
    )
    assert headers[0].max_timestamp == 1_700_000_000_000


def test_wrong_crc_is_corrupt() -> None:
    data = bytearray(_batch())
    data[-1] ^= 0xFF
    with pytest.raises(InvalidRecords) as info:
        parse_batches(bytes(data), MAX)
    assert info.value.error == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported(magic: int) -> None:
    data = bytearray(_batch())
    data[16] = magic
    with pytest.raises(InvalidRecords) as info:
        parse_batches(bytes(data), MAX)
    assert info.value.error == ErrorCode.unsupported_for_message_format


def test_short_legacy_message_set_is_unsupported() -> None:
    # A v0 message: offset(8) size(4) crc(4) magic(1)=0 ... shorter than a v2 header.
    legacy = struct.pack(">qiIbb", 0, 14, 0, 0, 0) + b"\xff\xff\xff\xff" + b"\x00" * 4
    with pytest.raises(InvalidRecords) as info:
        parse_batches(legacy, MAX)
    assert info.value.error == ErrorCode.unsupported_for_message_format


def test_oversized_batch_is_too_large() -> None:
    data = _batch(50)
    with pytest.raises(InvalidRecords) as info:
        parse_batches(data, len(data) - 1)
    assert info.value.error == ErrorCode.message_too_large


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d[:-5],  # truncated body
        lambda d: d[:30],  # truncated header
        lambda d: d + b"\x00\x01",  # trailing garbage
    ],
)
def test_a_batch_cut_short_is_invalid_record(mangle) -> None:  # type: ignore[no-untyped-def]
    """Kafka's batch iterator does not see a batch longer than the bytes left: the request
    has no batch, INVALID_RECORD (the differential test compares it with Kafka 4.4)."""
    with pytest.raises(InvalidRecords) as info:
        parse_batches(mangle(_batch()), MAX)
    assert info.value.error == ErrorCode.invalid_record


def test_a_length_below_the_header_size_is_corrupt() -> None:
    data = _batch()
    with pytest.raises(InvalidRecords) as info:
        parse_batches(data[:8] + struct.pack(">i", 10) + data[12:], MAX)
    assert info.value.error == ErrorCode.corrupt_message


def test_empty_records_are_invalid() -> None:
    with pytest.raises(InvalidRecords) as info:
        parse_batches(b"", MAX)
    assert info.value.error == ErrorCode.invalid_record


def test_patched_prefix_keeps_crc_valid_and_sets_offsets() -> None:
    data = _batch(4)
    patched = patched_prefix(1234, len(data), 0) + data[PATCHED_PREFIX_SIZE:]
    (batch,) = parse_batches(patched, MAX)  # CRC still valid
    assert batch.size == len(data)
    parsed, _ = read_batch(memoryview(patched), 0)
    assert parsed.base_offset == 1234
    assert [r.offset for r in parsed.records] == [1234, 1235, 1236, 1237]
    assert struct.unpack_from(">i", patched, 12)[0] == 0  # leader epoch


def test_stamp_log_append_time_sets_type_and_time_and_crc() -> None:
    data = _batch(2)
    stamped = stamp_log_append_time(memoryview(data), 1_800_000_000_000)
    (batch,) = parse_batches(bytes(stamped), MAX)
    assert batch.attributes & 0x08
    assert batch.max_timestamp == 1_800_000_000_000
    assert struct.unpack_from(">I", stamped, 17)[0] == crc32c.crc32c(bytes(stamped[21:]))
    assert data[21:23] == b"\x00\x00"  # the original is untouched
