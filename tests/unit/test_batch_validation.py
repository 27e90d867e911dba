"""Every batch is opened and checked before it is acknowledged (issue 12, item 4): the Kafka
error each corrupt batch gets, and that honest batches of every codec pass untouched."""

from __future__ import annotations

import random
import struct
import warnings

import pytest
import zstandard
from kio.schema.errors import ErrorCode

from protocol.batch_validation import NO_RULES, Rules, validate_records
from protocol.compression import (
    GZIP,
    LZ4,
    MAX_DECOMPRESSED_BYTES,
    SNAPPY,
    ZSTD,
    compress,
)
from protocol.records import InvalidRecords, parse_batches
from tests.e2e._batches import Record, build_batch, build_raw_batch, encode_record

NOW = 1_700_000_000_000
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
LONG_MAX = (1 << 63) - 1


def _validate(data: bytes, rules: Rules = NO_RULES) -> tuple[memoryview, list]:  # type: ignore[type-arg]
    view = memoryview(data)
    return validate_records(view, parse_batches(view, 1 << 30), rules, NOW)


def _refused(data: bytes, rules: Rules = NO_RULES) -> InvalidRecords:
    with pytest.raises(InvalidRecords) as info:
        _validate(data, rules)
    return info.value


def _payload(n: int, key: bytes | None = b"k", ts_deltas: list[int] | None = None) -> bytes:
    deltas = ts_deltas or [0] * n
    return b"".join(encode_record(Record(key, b"v%d" % i), i, deltas[i]) for i in range(n))


def _batch(payload: bytes, count: int, codec: int = 0, **kw: int) -> bytes:
    body = compress(codec, payload) if codec else payload
    return build_raw_batch(
        body,
        records_count=count,
        base_timestamp_ms=NOW,
        attributes=codec | kw.pop("attrs", 0),
        **kw,
    )


# ---------------------------------------------------------------- honest batches


@pytest.mark.parametrize("codec", [0, *CODECS.values()])
def test_honest_batch_of_every_codec_is_stored_as_sent(codec: int) -> None:
    data = _batch(_payload(20), 20, codec)
    records, batches = _validate(data)
    assert bytes(records) == data  # not copied, not rewritten
    assert batches[0].records_count == 20


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_batches_a_stock_client_builds_pass(codec: str) -> None:
    # kafka-python's own batch writer: its xerial snappy, lz4 frame and zstd framing.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's schema loading
        from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type={"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(50):
        builder.append(i, timestamp=NOW + i, key=b"key%d" % i, value=b"x" * 300, headers=[])
    data = bytes(builder.build())
    records, batches = _validate(data)
    assert bytes(records) == data and batches[0].max_timestamp == NOW + 49


def test_zstd_without_content_size_and_in_two_frames_passes() -> None:
    # zstd-jni (the Java client) streams: no content size in the frame header, possibly
    # several frames; both are legal.
    payload = _payload(10)
    c = zstandard.ZstdCompressor(write_content_size=False)
    body = c.compress(payload[:40]) + c.compress(payload[40:])
    _validate(build_raw_batch(body, records_count=10, base_timestamp_ms=NOW, attributes=ZSTD))


def test_raw_snappy_without_xerial_framing_passes() -> None:
    import cramjam

    body = bytes(cramjam.snappy.compress_raw(_payload(5)))
    _validate(build_raw_batch(body, records_count=5, base_timestamp_ms=NOW, attributes=SNAPPY))


def test_max_timestamp_is_set_from_the_records_as_kafka_does() -> None:
    data = _batch(_payload(3, ts_deltas=[0, 70, 20]), 3)  # header claims maxTimestamp = NOW
    records, batches = _validate(data)
    assert batches[0].max_timestamp == NOW + 70
    (again,) = parse_batches(records, 1 << 30)  # CRC recomputed: still a valid batch
    assert again.max_timestamp == NOW + 70
    assert bytes(records[61:]) == data[61:]


# ---------------------------------------------------------------- the corrupt batches


@pytest.mark.parametrize("codec", CODECS.values())
def test_codec_flag_over_garbage_is_corrupt(codec: int) -> None:
    garbage = random.Random(codec).randbytes(300)
    data = build_raw_batch(garbage, records_count=1, base_timestamp_ms=NOW, attributes=codec)
    assert _refused(data).error == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", CODECS.values())
def test_junk_after_the_compressed_stream_is_corrupt(codec: int) -> None:
    body = compress(codec, _payload(2)) + b"\x00junk"
    data = build_raw_batch(body, records_count=2, base_timestamp_ms=NOW, attributes=codec)
    assert _refused(data).error == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_are_corrupt(codec: int) -> None:
    data = build_raw_batch(_payload(1), records_count=1, base_timestamp_ms=NOW, attributes=codec)
    assert _refused(data).error == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [0, *CODECS.values()])
def test_body_that_is_not_records_is_invalid(codec: int) -> None:
    data = _batch(b"\x7f" + b"this is not a record" * 3, 1, codec)
    assert _refused(data).error == ErrorCode.invalid_record


@pytest.mark.parametrize("count", [2**31 - 1, 1000])
@pytest.mark.parametrize("codec", [0, ZSTD])
def test_record_count_larger_than_the_records_is_invalid(count: int, codec: int) -> None:
    # lastOffsetDelta agrees with the count, so only walking the records shows the lie.
    exc = _refused(_batch(_payload(1), count, codec))
    assert exc.error == ErrorCode.invalid_record
    assert "fewer records" in str(exc)


@pytest.mark.parametrize("codec", [0, LZ4])
def test_header_claiming_one_record_around_three_is_invalid(codec: int) -> None:
    assert _refused(_batch(_payload(3), 1, codec)).error == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", [0, GZIP])
def test_offset_delta_other_than_position_is_invalid(codec: int) -> None:
    payload = encode_record(Record(b"k", b"v"), 5)
    assert _refused(_batch(payload, 1, codec)).error == ErrorCode.invalid_record


def test_header_count_disagreeing_with_last_offset_delta_is_invalid() -> None:
    data = _batch(_payload(2), 2, last_offset_delta=5)
    with pytest.raises(InvalidRecords) as info:
        parse_batches(data, 1 << 30)
    assert info.value.error == ErrorCode.invalid_record


def test_negative_key_length_other_than_null_is_invalid() -> None:
    body = b"\x00\x00\x00" + b"\x03" + b"\x02v" + b"\x00"  # key length -2 (zig-zag 3)
    payload = bytes([len(body) * 2]) + body
    assert _refused(_batch(payload, 1)).error == ErrorCode.invalid_record


def test_bad_second_batch_refuses_the_partition() -> None:
    good = _batch(_payload(2), 2)
    bad = _batch(_payload(1), 3)
    assert _refused(good + bad).error == ErrorCode.invalid_record


def test_control_batch_from_a_client_is_invalid() -> None:
    assert _refused(_batch(_payload(1), 1, attrs=0x20)).error == ErrorCode.invalid_record


def test_producer_id_without_sequence_is_invalid() -> None:
    data = _batch(_payload(1), 1, producer_id=7, producer_epoch=0, base_sequence=-1)
    assert _refused(data).error == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", CODECS.values())
def test_decompression_bomb_is_refused_within_the_limit(codec: int) -> None:
    # A few KiB that claim more than the limit: refused as too large once the scratch
    # buffer is full, never decompressed into memory without bound.
    body = compress(codec, bytes(MAX_DECOMPRESSED_BYTES + 1))
    assert len(body) < MAX_DECOMPRESSED_BYTES // 20  # snappy's best ratio is ~21:1
    data = build_raw_batch(body, records_count=1, base_timestamp_ms=NOW, attributes=codec)
    assert _refused(data).error == ErrorCode.message_too_large


def test_snappy_block_claiming_gigabytes_is_refused_before_decoding() -> None:
    # A raw snappy block starts with its decoded length: 2 GiB claimed in 5 bytes.
    body = b"\x80\x80\x80\x80\x08" + b"\x00" * 10
    data = build_raw_batch(body, records_count=1, base_timestamp_ms=NOW, attributes=SNAPPY)
    assert _refused(data).error == ErrorCode.message_too_large


# ---------------------------------------------------------------- topic rules


COMPACTED = Rules(
    require_keys=True, check_timestamps=True, before_max_ms=LONG_MAX, after_max_ms=LONG_MAX
)


@pytest.mark.parametrize("codec", [0, SNAPPY])
def test_keyless_record_on_compacted_topic_is_invalid_with_its_index(codec: int) -> None:
    payload = b"".join(encode_record(Record(None if i == 1 else b"k", b"v"), i) for i in range(3))
    exc = _refused(_batch(payload, 3, codec), COMPACTED)
    assert exc.error == ErrorCode.invalid_record
    assert [i for i, _ in exc.record_errors] == [1]
    _validate(_batch(payload, 3, codec))  # the same batch is fine on a non-compacted topic


def test_tombstone_with_key_is_fine_on_compacted_topic() -> None:
    _validate(_batch(encode_record(Record(b"k", None), 0), 1), COMPACTED)


def test_timestamps_out_of_range_are_invalid_timestamp_with_indexes() -> None:
    rules = Rules(False, True, before_max_ms=60_000, after_max_ms=60_000)
    data = _batch(_payload(4, ts_deltas=[0, -120_000, 30_000, 120_000]), 4)
    exc = _refused(data, rules)
    assert exc.error == ErrorCode.invalid_timestamp
    assert [i for i, _ in exc.record_errors] == [1, 3]
    # A LogAppendTime topic does not look at producers' timestamps.
    _validate(data, Rules(False, False, 60_000, 60_000))


def test_client_batch_claiming_log_append_time_is_invalid_timestamp() -> None:
    exc = _refused(_batch(_payload(2), 2, attrs=0x08))
    assert exc.error == ErrorCode.invalid_timestamp
    assert [i for i, _ in exc.record_errors] == [0, 1]


def test_record_errors_are_listed_in_full_but_the_message_stays_short() -> None:
    payload = b"".join(encode_record(Record(None, b"v"), i) for i in range(500))
    exc = _refused(_batch(payload, 500), COMPACTED)
    assert [i for i, _ in exc.record_errors] == list(range(500))
    assert len(str(exc)) < 400


def test_build_batch_helper_still_builds_valid_batches() -> None:
    _validate(build_batch([Record(b"a", b"b", [("h", None)])], base_timestamp_ms=NOW))
    assert struct.unpack_from(">i", _batch(_payload(1), 1), 57)[0] == 1


def test_zstd_frame_claiming_a_huge_window_does_not_cost_its_memory() -> None:
    # A 13-byte zstd frame whose header asks for a 128 MiB window, then gigabytes claimed
    # by a frame header that libzstd refuses outright: neither is stored.
    frame = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 17 << 3, 0x09, 0, 0]) + b"x"
    data = build_raw_batch(frame, records_count=1, base_timestamp_ms=NOW, attributes=ZSTD)
    assert _refused(data).error == ErrorCode.invalid_record  # 1 byte is not a record
    huge = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 31 << 3, 0x09, 0, 0]) + b"x"
    data = build_raw_batch(huge, records_count=1, base_timestamp_ms=NOW, attributes=ZSTD)
    assert _refused(data).error == ErrorCode.corrupt_message
