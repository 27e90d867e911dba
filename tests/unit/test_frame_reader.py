"""FrameReader: the BufferedProtocol receive side (protocol/framing.py)."""

from __future__ import annotations

import random
import struct

import pytest

from protocol.framing import FrameReader, FrameTooLarge


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _feed(reader: FrameReader, data: bytes, max_read: int) -> list[bytes]:
    """Deliver ``data`` as a socket would, at most ``max_read`` bytes per read; frames
    are copied out at once (they are only valid until the next get_buffer)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), max_read, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        pos += n
        out += [bytes(f) for f in reader.frames_received(n)]
        reader.release()
    return out


@pytest.mark.parametrize("seed", range(12))
def test_any_split_of_the_stream_gives_the_frames(seed: int) -> None:
    rnd = random.Random(seed)
    sizes = [0, 1, 10, 1000, 70_000, 300_000]
    payloads = [rnd.randbytes(rnd.choice(sizes)) for _ in range(25)]
    stream = b"".join(_frame(p) for p in payloads)
    reader = FrameReader(1 << 20, initial_size=rnd.choice([16, 1024, 65536]), keep_size=1 << 18)
    assert _feed(reader, stream, rnd.choice([7, 4096, 65536, 1 << 20])) == payloads


def test_frames_are_read_only_views() -> None:
    reader = FrameReader(1024)
    buf = reader.get_buffer()
    data = _frame(b"abc") + _frame(b"de")
    buf[: len(data)] = data
    frames = reader.frames_received(len(data))
    assert [bytes(f) for f in frames] == [b"abc", b"de"]
    assert all(f.readonly for f in frames)  # kio's reader insists on read-only buffers


def test_a_claimed_size_is_not_allocated_up_front() -> None:
    reader = FrameReader(100 << 20)
    _feed(reader, struct.pack(">i", 100 << 20) + b"x" * 1000, 65536)
    assert reader.capacity <= 128 * 1024


def test_reads_stop_at_the_end_of_a_large_frame() -> None:
    reader = FrameReader(8 << 20)
    payload = random.Random(1).randbytes(1 << 20)
    data = _frame(payload) + _frame(b"next")
    buf = reader.get_buffer()
    buf[:1004] = data[:1004]
    assert reader.frames_received(1004) == []
    # Room up to the frame's end and no further: it completes in place, nothing moves.
    assert len(reader.get_buffer()) <= len(payload) + 4 - 1004
    assert _feed(reader, data[1004:], 1 << 20) == [payload, b"next"]


def test_an_outsized_buffer_shrinks_back() -> None:
    reader = FrameReader(64 << 20, initial_size=1024, keep_size=1 << 20)
    _feed(reader, _frame(bytes(4 << 20)), 1 << 20)
    assert reader.capacity == 1024


@pytest.mark.parametrize("size", [-1, 1025])
def test_bad_size_prefix_is_refused(size: int) -> None:
    reader = FrameReader(1024)
    buf = reader.get_buffer()
    buf[:5] = struct.pack(">i", size) + b"x"
    with pytest.raises(FrameTooLarge):
        reader.frames_received(5)
