"""Walking the records of a v2 batch: the compiled walker and its pure-Python reference.

Every batch is walked before it is acknowledged (protocol/batch_validation.py), so the walk
is on the produce hot path: it runs in C (``_recwalk.c``, built by setup.py) at a few ns per
record. ``walk_reference`` below is the same contract in Python, ~1 µs per record: the tests
hold the compiled walker to it on random and mutated inputs, and bench/ measures both.

A record, as Kafka's DefaultRecord writes it (varints are zig-zag; varint <= 5 bytes and
32 bits, varlong <= 10 bytes, as Kafka's ByteUtils reads them)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value
    | headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*
"""

from __future__ import annotations

from typing import NamedTuple

from ._recwalk import walk as _walk

OK = 0
TRUNCATED = 1
BAD_VARINT = 2
BAD_LENGTH = 3
LENGTH_MISMATCH = 4
OFFSET_DELTA = 5
TOO_FEW = 6
TOO_MANY = 7

FAULTS = {
    TRUNCATED: "ends past the bytes present",
    BAD_VARINT: "has a varint longer than Kafka allows",
    BAD_LENGTH: "has a negative length (only -1, null, is allowed for keys and values)",
    LENGTH_MISMATCH: "does not end where its length says",
    OFFSET_DELTA: "has an offset delta other than its position in the batch",
    TOO_FEW: "is missing: the batch holds fewer records than its header's count",
    TOO_MANY: "is beyond the header's count: bytes are left over",
}

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


class Walk(NamedTuple):
    status: int  # OK or one of the faults above
    index: int  # the record where the fault was found (0 when OK)
    max_timestamp: int  # largest base + delta, -1 if none is larger (Kafka's NO_TIMESTAMP)
    keyless: list[int] | None  # records without a key, when keys are required
    bad_timestamps: list[int] | None  # records outside [ts_min, ts_max]


def walk(
    records: bytes | bytearray | memoryview,
    count: int,
    base_timestamp: int,
    ts_min: int = INT64_MIN,
    ts_max: int = INT64_MAX,
    need_key: bool = False,
) -> Walk:
    """Walk an uncompressed records section that should hold ``count`` records."""
    return Walk(*_walk(records, count, base_timestamp, ts_min, ts_max, need_key))


class _Fault(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _varint(data: bytes, pos: int, end: int, max_shift: int, bits: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise _Fault(TRUNCATED)
        b = data[pos]
        pos += 1
        if not b & 0x80:
            value |= b << shift
            break
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > max_shift:
            raise _Fault(BAD_VARINT)
    value &= (1 << bits) - 1
    return (value >> 1) ^ -(value & 1), pos


def _bytes_field(data: bytes, pos: int, end: int, nullable: bool) -> tuple[bool, int]:
    n, pos = _varint(data, pos, end, 28, 32)
    if n < 0:
        if n == -1 and nullable:
            return True, pos
        raise _Fault(BAD_LENGTH)
    if end - pos < n:
        raise _Fault(TRUNCATED)
    return False, pos + n


def walk_reference(
    records: bytes | bytearray | memoryview,
    count: int,
    base_timestamp: int,
    ts_min: int = INT64_MIN,
    ts_max: int = INT64_MAX,
    need_key: bool = False,
) -> Walk:
    """The contract of ``walk``, in plain Python (tests and benchmarks only)."""
    data = bytes(records)
    end = len(data)
    pos = index = 0
    max_ts = -1
    keyless: list[int] = []
    bad_ts: list[int] = []
    try:
        while pos < end:
            if index >= count:
                raise _Fault(TOO_MANY)
            length, pos = _varint(data, pos, end, 28, 32)
            if length < 0:
                raise _Fault(BAD_LENGTH)
            if end - pos < length or length == 0:
                raise _Fault(TRUNCATED)
            rend = pos + length
            pos += 1  # attributes
            ts_delta, pos = _varint(data, pos, rend, 63, 64)
            offset_delta, pos = _varint(data, pos, rend, 28, 32)
            if offset_delta != index:
                raise _Fault(OFFSET_DELTA)
            key_null, pos = _bytes_field(data, pos, rend, True)
            _, pos = _bytes_field(data, pos, rend, True)
            headers, pos = _varint(data, pos, rend, 28, 32)
            if headers < 0:
                raise _Fault(BAD_LENGTH)
            for _ in range(headers):
                _, pos = _bytes_field(data, pos, rend, False)
                _, pos = _bytes_field(data, pos, rend, True)
            if pos != rend:
                raise _Fault(LENGTH_MISMATCH)
            # 64-bit two's complement wrap, as Java's long addition
            ts = ((base_timestamp + ts_delta + (1 << 63)) % (1 << 64)) - (1 << 63)
            max_ts = max(max_ts, ts)
            if need_key and key_null:
                keyless.append(index)
            elif ts != -1 and not ts_min <= ts <= ts_max:
                bad_ts.append(index)
            index += 1
        if index < count:
            raise _Fault(TOO_FEW)
    except _Fault as fault:
        return Walk(fault.status, index, max_ts, None, None)
    return Walk(OK, 0, max_ts, keyless or None, bad_ts or None)
