"""Size-prefixed frames: a 4-byte big-endian length, then that many bytes."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    pass


class FrameDecoder:
    """Splits a byte stream into frames.

    When a chunk of input holds whole frames and nothing is buffered, frames are
    memoryviews into that chunk (no copy); only a frame split across reads is
    assembled in a bytearray.
    """

    __slots__ = ("_buffer", "_max_size")

    def __init__(self, max_size: int) -> None:
        self._buffer = bytearray()
        self._max_size = max_size

    def feed(self, data: bytes) -> list[memoryview]:
        """Frames completed by ``data``. Raises FrameTooLarge for a bad size prefix."""
        if not self._buffer:
            frames, used = self._split(data, copy=False)
            if used < len(data):
                self._buffer = bytearray(memoryview(data)[used:])
            return frames
        self._buffer += data
        frames, used = self._split(self._buffer, copy=True)
        del self._buffer[:used]
        return frames

    def _split(self, data: bytes | bytearray, copy: bool) -> tuple[list[memoryview], int]:
        frames: list[memoryview] = []
        pos = 0
        end = len(data)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 0 or size > self._max_size:
                raise FrameTooLarge(
                    f"frame size {size} outside 0..{self._max_size} (socket.request.max.bytes)"
                )
            if end - pos - 4 < size:
                break
            if copy:
                # The bytearray is reused for later input, so the frame gets its own bytes.
                frames.append(memoryview(bytes(memoryview(data)[pos + 4 : pos + 4 + size])))
            else:
                frames.append(memoryview(data)[pos + 4 : pos + 4 + size])
            pos += 4 + size
        return frames, pos
