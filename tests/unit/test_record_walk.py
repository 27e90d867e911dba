"""The compiled record walker against its pure-Python reference, on valid, mutated and random
records sections: same verdict, same record index, same timestamps and per-record findings,
and never a crash or a read past the bytes given (hostile input)."""

from __future__ import annotations

import random

import pytest

from protocol import record_walk
from protocol.record_walk import walk, walk_reference
from tests.e2e._batches import Record, encode_record, varint

BASE_TS = 1_700_000_000_000


def _records(rnd: random.Random, n: int, pad: bool = True) -> list[bytes]:
    out = []
    for i in range(n):
        key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(12))
        value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.randrange(200))
        headers = [
            (f"h{j}", None if rnd.random() < 0.3 else rnd.randbytes(rnd.randrange(6)))
            for j in range(rnd.choice([0, 0, 1, 3]))
        ]
        ts_delta = rnd.choice([0, i, -5, 10**6, 2**40])
        rec = encode_record(Record(key, value, headers), i, ts_delta)
        if pad and rnd.random() < 0.03:
            rec = _padded(rec, rnd.randrange(1, 4))
        out.append(rec)
    return out


def _padded(rec: bytes, extra: int) -> bytes:
    """The record with ``extra`` junk bytes inside its declared length."""
    prefix = next(i for i, b in enumerate(rec) if not b & 0x80) + 1
    body = rec[prefix:] + b"\x00" * extra
    return varint(len(body)) + body


def _mutate(rnd: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rnd.randrange(1, 4)):
        op = rnd.randrange(5)
        if op == 0 and b:
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        elif op == 1 and b:
            del b[rnd.randrange(len(b)) :]
        elif op == 2:
            at = rnd.randrange(len(b) + 1)
            b[at:at] = rnd.randbytes(rnd.randrange(1, 6))
        elif op == 3 and b:
            b[rnd.randrange(len(b))] |= 0x80  # stretch a varint
        elif op == 4 and b:
            at = rnd.randrange(len(b))
            b[at : at + 1] = b"\xff" * rnd.randrange(1, 12)  # over-long varint
    return bytes(b)


def _both(data: bytes, count: int, **kw: object) -> record_walk.Walk:
    fast = walk(data, count, BASE_TS, **kw)  # type: ignore[arg-type]
    ref = walk_reference(data, count, BASE_TS, **kw)  # type: ignore[arg-type]
    assert fast == ref, (data.hex(), count, kw)
    return fast


@pytest.mark.parametrize("seed", range(6))
def test_compiled_walker_agrees_with_reference(seed: int) -> None:
    rnd = random.Random(seed)
    verdicts: set[int] = set()
    for _ in range(600):
        recs = _records(rnd, rnd.randrange(0, 6))
        data = b"".join(recs)
        count = len(recs) if rnd.random() < 0.7 else rnd.randrange(0, 8)
        kw = {
            "need_key": rnd.random() < 0.5,
            "ts_min": rnd.choice([record_walk.INT64_MIN, BASE_TS, BASE_TS + 1]),
            "ts_max": rnd.choice([record_walk.INT64_MAX, BASE_TS + 10**6]),
        }
        verdicts.add(_both(data, count, **kw).status)
        verdicts.add(_both(_mutate(rnd, data), count, **kw).status)
        verdicts.add(_both(rnd.randbytes(rnd.randrange(40)), rnd.randrange(4), **kw).status)
    # The fuzzing reached every verdict, so the agreement above means something.
    assert verdicts == {record_walk.OK, *record_walk.FAULTS}


def test_valid_records_walk_clean() -> None:
    recs = _records(random.Random(1), 50, pad=False)
    got = _both(b"".join(recs), 50)
    assert got.status == record_walk.OK
    assert got.keyless is None and got.bad_timestamps is None


def _one(offset_delta: int = 0, key: bytes | None = b"k", ts_delta: int = 0) -> bytes:
    return encode_record(Record(key, b"v"), offset_delta, ts_delta)


@pytest.mark.parametrize(
    ("data", "count", "status", "index"),
    [
        (_one() * 1, 1000, record_walk.TOO_FEW, 1),  # recordCount 1000 around one record
        (_one(), 2**31 - 1, record_walk.TOO_FEW, 1),
        (_one(0) + _one(1) + _one(2), 1, record_walk.TOO_MANY, 1),  # header says 1, has 3
        (_one(5), 1, record_walk.OFFSET_DELTA, 0),  # offset delta 5 in a one-record batch
        (_one(0) + _one(0), 2, record_walk.OFFSET_DELTA, 1),
        (_one()[:-1], 1, record_walk.TRUNCATED, 0),
        (_one() + b"\x00", 1, record_walk.TOO_MANY, 1),  # a trailing byte
        (b"\xff\xff\xff\xff\xff\x01", 1, record_walk.BAD_VARINT, 0),
        (varint(-3) + b"\x00" * 8, 1, record_walk.BAD_LENGTH, 0),
        # key length -2: only -1 (null) is a legal negative length
        (varint(6) + b"\x00\x00\x00" + varint(-2) + b"\x00\x00", 1, record_walk.BAD_LENGTH, 0),
        # header key length -1: header keys cannot be null
        (varint(7) + b"\x00\x00\x00\x01\x01\x02" + varint(-1), 1, record_walk.BAD_LENGTH, 0),
        # declared length 9 but fields end after 6
        (varint(9) + b"\x00\x00\x00\x01\x01\x00" + b"\x00" * 3, 1, record_walk.LENGTH_MISMATCH, 0),
        (b"", 1, record_walk.TOO_FEW, 0),
    ],
)
def test_faults(data: bytes, count: int, status: int, index: int) -> None:
    got = _both(data, count)
    assert (got.status, got.index) == (status, index)


def test_keyless_and_timestamps_are_listed_per_record() -> None:
    data = _one(0) + _one(1, key=None) + _one(2, ts_delta=5000) + _one(3, key=None, ts_delta=9)
    got = _both(data, 4, need_key=True, ts_max=BASE_TS + 1000)
    assert got.status == record_walk.OK
    assert got.keyless == [1, 3]  # record 3 is listed under its first fault only
    assert got.bad_timestamps == [2]
    assert got.max_timestamp == BASE_TS + 5000


def test_no_timestamp_is_never_out_of_range() -> None:
    # Kafka's NO_TIMESTAMP (-1) is exempt from message.timestamp.* checks.
    got = walk(_one(ts_delta=0), 1, -1, ts_min=0, ts_max=10)
    assert got.status == record_walk.OK and got.bad_timestamps is None


def test_huge_claimed_lengths_do_not_read_past_the_buffer() -> None:
    # A record claiming 2^31-1 bytes, a key claiming 2^30, a header count of 2^31-1: the
    # walker must stop at the end of what is there (ASan-free proof: same answer as Python,
    # from a buffer that ends right there).
    for data in (
        varint(2**31 - 1) + b"\x00",
        varint(20) + b"\x00\x00\x00" + varint(2**30) + b"\x00" * 16,
        varint(8) + b"\x00\x00\x00\x01\x01" + varint(2**31 - 1) + b"\x00\x00",
    ):
        assert _both(memoryview(data), 1).status != record_walk.OK


class _GuardedBuffer:
    """Bytes placed right before an inaccessible page: reading one byte past them faults
    (the test process dies), so passing means the walker never read outside its input."""

    def __init__(self) -> None:
        import ctypes
        import mmap

        self._ctypes = ctypes
        self.page = mmap.PAGESIZE
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.size = 4 * self.page
        self.base = libc.mmap(
            None,
            self.size + self.page,
            mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            -1,
            0,
        )
        assert self.base not in (None, ctypes.c_void_p(-1).value)
        assert libc.mprotect(self.base + self.size, self.page, 0) == 0  # PROT_NONE

    def view(self, data: bytes) -> memoryview:
        assert len(data) <= self.size
        start = self.base + self.size - len(data)
        self._ctypes.memmove(start, data, len(data))
        return memoryview((self._ctypes.c_char * len(data)).from_address(start)).cast("B")


def test_hostile_inputs_never_read_past_the_end() -> None:
    guard = _GuardedBuffer()
    rnd = random.Random(99)
    for _ in range(3000):
        data = b"".join(_records(rnd, rnd.randrange(1, 4)))
        data = _mutate(rnd, data)[: guard.size]
        count = rnd.randrange(5)
        got = walk(guard.view(data), count, BASE_TS, need_key=True)
        assert got == walk_reference(data, count, BASE_TS, need_key=True)
    # Every varint and length at the very last byte: cut a valid record at each position.
    rec = _one() + _one(1, key=b"x" * 40)
    for cut in range(len(rec)):
        assert walk(guard.view(rec[:cut]), 2, BASE_TS).status != record_walk.OK
