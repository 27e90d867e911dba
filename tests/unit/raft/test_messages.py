"""Wire encoding of Raft messages: round trips, and malformed input refused cleanly."""

from __future__ import annotations

import random

import pytest

from controller.raft.messages import (
    AppendRequest,
    AppendResponse,
    DecodeError,
    Entry,
    EntryKind,
    Message,
    Snapshot,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
    decode,
    encode,
)


def random_message(rng: random.Random) -> Message:
    term, src, dst = rng.randrange(1 << 40), rng.randrange(5), rng.randrange(5)
    kind = rng.randrange(5)
    if kind == 0:
        return VoteRequest(
            term, src, dst, rng.randrange(1 << 50), rng.randrange(99), rng.random() < 0.5
        )
    if kind == 1:
        return VoteResponse(term, src, dst, rng.random() < 0.5, rng.random() < 0.5)
    if kind == 2:
        prev = rng.randrange(1000)
        entries = tuple(
            Entry(prev + 1 + i, term, rng.randbytes(rng.randrange(40)), EntryKind(rng.randrange(2)))
            for i in range(rng.randrange(6))
        )
        return AppendRequest(term, src, dst, prev, rng.randrange(term + 1), 7, 9, entries)
    if kind == 3:
        return AppendResponse(term, src, dst, rng.random() < 0.5, 5, 4, 3, rng.randrange(1 << 60))
    snap = Snapshot(rng.randrange(1 << 30), term, (1, 2, 3), rng.randbytes(rng.randrange(100)))
    return SnapshotRequest(term, src, dst, rng.randrange(100), snap)


def test_round_trip() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        msg = random_message(rng)
        assert decode(b"".join(encode(msg))) == msg


def test_truncated_or_extended_frames_are_refused() -> None:
    rng = random.Random(8)
    for _ in range(300):
        data = b"".join(encode(random_message(rng)))
        with pytest.raises(DecodeError):
            decode(data[: rng.randrange(len(data))])
        with pytest.raises(DecodeError):
            decode(data + b"\0")


def test_absurd_entry_count_is_refused_without_looping() -> None:
    data = bytearray(b"".join(encode(AppendRequest(1, 1, 2, 0, 0, 0, 0, ()))))
    data[-4:] = (0xFFFFFFFF).to_bytes(4, "big")
    with pytest.raises(DecodeError, match="exceeds"):
        decode(bytes(data))


def test_unknown_version_and_type() -> None:
    data = bytearray(b"".join(encode(VoteResponse(1, 1, 2, True, False))))
    data[0] = 9
    with pytest.raises(DecodeError, match="version"):
        decode(bytes(data))
    data[0], data[1] = 1, 77
    with pytest.raises(DecodeError, match="type"):
        decode(bytes(data))
