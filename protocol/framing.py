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


class FrameReader:
    """The receive side of an ``asyncio.BufferedProtocol``: the kernel writes straight
    into one reusable buffer per connection, and complete frames are handed out as
    views into it.

    FrameDecoder above costs up to four copies of every byte of a large request (the
    loop's bytes object per read, the reassembly bytearray, the frame's own bytes, the
    shift of the remainder); here there is none, and no allocation per read. The price:
    a frame from :meth:`frames_received` is only valid until the next
    :meth:`get_buffer` call, so the caller decodes it at once (kio's decoder copies
    what it keeps, record data included).

    The buffer grows as bytes arrive, at most doubling per step, never to the size a
    length prefix merely claims. While a large frame (over ``large_size``) is incomplete,
    reads stop at its end, so it is completed in place and nothing has to be moved
    afterwards. A new connection starts small: an idle one holds 4 KiB, not the 64 KiB
    an active one grows to (tens of thousands of idle sockets must not cost gigabytes).
    """

    __slots__ = (
        "_buf",
        "_end",
        "_initial",
        "_keep",
        "_large",
        "_max_size",
        "_ro",
        "_start",
        "_view",
        "incomplete_size",
    )

    def __init__(
        self,
        max_size: int,
        initial_size: int = 4 * 1024,
        keep_size: int = 8 * 1024 * 1024,
        large_size: int = 64 * 1024,
    ) -> None:
        self._max_size = max_size
        self._initial = initial_size
        self._large = max(large_size, initial_size)
        # A buffer grown past this for one huge frame goes back to the initial size once
        # that frame is decoded; below it, the buffer stays as large as the largest frame.
        self._keep = max(keep_size, initial_size)
        self._buf = bytearray(initial_size)
        self._view = memoryview(self._buf)
        self._ro = self._view.toreadonly()  # frames are read-only views (kio insists)
        self._start = 0  # first byte not yet handed out as part of a frame
        self._end = 0  # end of the bytes received
        # The size of the frame being received when it is a large one (what receiving it
        # will hold), else 0 (small frames need no reservation): as of the last
        # ``frames_received``, which reads its size prefix anyway.
        self.incomplete_size = 0

    @property
    def capacity(self) -> int:
        return len(self._buf)

    @property
    def max_size(self) -> int:
        return self._max_size

    @max_size.setter
    def max_size(self, size: int) -> None:
        # A SASL listener reads small frames until the client has authenticated.
        self._max_size = size

    def get_buffer(self) -> memoryview:
        """Where the next read goes (never empty)."""
        start, end = self._start, self._end
        pending = end - start
        wanted = self._head_frame_end() - start if pending >= 4 else 0
        if wanted > self._large:
            # A large frame is incomplete: room up to its end and no further.
            if start + wanted > len(self._buf):
                if wanted <= len(self._buf):
                    self._move_to_front()
                else:
                    self._grow(min(wanted, max(2 * len(self._buf), 2 * pending)))
            limit = min(self._start + wanted, len(self._buf))
            return self._view[self._end : limit]
        if end == len(self._buf):
            if start > 0:
                self._move_to_front()
            else:
                self._grow(2 * len(self._buf))
        return self._view[self._end :]

    def frames_received(self, nbytes: int) -> list[memoryview]:
        """Frames completed by ``nbytes`` new bytes. Raises FrameTooLarge for a bad
        size prefix."""
        self._end += nbytes
        frames: list[memoryview] = []
        view = self._ro
        pos, end = self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > self._max_size:
                raise FrameTooLarge(
                    f"frame size {size} outside 0..{self._max_size} (socket.request.max.bytes)"
                )
            if end - pos - 4 < size:
                break
            frames.append(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos == end:
            # Everything handed out: the next read starts at the beginning again.
            self._start = self._end = 0
            self.incomplete_size = 0
        else:
            self._start = pos
            # The loop stopped at the incomplete frame's size prefix, if it has one.
            whole = 4 + size if end - pos >= 4 else 0
            self.incomplete_size = whole if whole > self._large else 0
        return frames

    def release(self) -> None:
        """Called after the frames of one read are decoded: drop an outsized buffer."""
        if self._start == self._end and len(self._buf) > self._keep:
            self._reset()

    def _head_frame_end(self) -> int:
        (size,) = _SIZE.unpack_from(self._view, self._start)
        return self._start + 4 + size

    def _move_to_front(self) -> None:
        pending = self._end - self._start
        self._buf[:pending] = self._buf[self._start : self._end]
        self._start, self._end = 0, pending

    def _grow(self, size: int) -> None:
        # A new buffer rather than a resize: views of the old one may still be alive
        # (a bytearray with exports cannot be resized).
        size = max(size, self._initial)
        pending = self._end - self._start
        buf = bytearray(size)
        buf[:pending] = self._view[self._start : self._end]
        self._set(buf)
        self._start, self._end = 0, pending

    def _reset(self) -> None:
        self._set(bytearray(self._initial))
        self._start = self._end = 0

    def _set(self, buf: bytearray) -> None:
        self._buf = buf
        self._view = memoryview(buf)
        self._ro = self._view.toreadonly()
