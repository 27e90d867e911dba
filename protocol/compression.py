"""Record batch compression codecs (attributes bits 0-2): none, gzip, snappy, lz4, zstd.

The produce path decompresses every batch once to validate its records
(``decompress_bounded``: never more than ``MAX_DECOMPRESSED_BYTES``, mostly into one reused
scratch mapping, with the C libraries where they measured faster: libzstd, liblz4); topics
whose ``compression.type`` names a codec also get produced batches recompressed
(broker/produce/recompress.py). ListOffsets by timestamp (record_scan.py) and the compaction job
(jobs/decode.py) use ``decompress``. The fetch path never decompresses.
"""

from __future__ import annotations

import mmap
import struct

import cramjam
import lz4.frame
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_MASK = 0x07
# Java clients write (and read) xerial's snappy framing: this magic, version 1, compatible 1,
# then length-prefixed raw snappy blocks. librdkafka reads and writes it too.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_BLOCK = 32 * 1024


class UnknownCodec(ValueError):
    pass


class TooLarge(ValueError):
    """Decompressed data past the caller's bound (a decompression bomb, or just too big)."""


_FIRST_GUESS = 64 * 1024


def decompress_limited(codec: int, data: bytes, limit: int) -> bytes:
    """Like :func:`decompress`, but never produces (or allocates) more than ``limit`` bytes
    (the recompression of produced batches, whose bound is a broker config): data a client
    sent is decompressed into a buffer that grows by doubling up to the bound, and the codec
    stops when the buffer is full."""
    if codec == NONE:
        if len(data) > limit:
            raise TooLarge(f"{len(data)} bytes exceed {limit}")
        return data
    if codec == SNAPPY:
        return _snappy_decompress_bounded(data, limit)
    module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}.get(codec)
    if module is None:
        raise UnknownCodec(f"unknown compression codec {codec}")
    # One byte past the bound: a buffer filled to that size proves the data is too large.
    cap = limit + 1
    size = min(cap, max(_FIRST_GUESS, 4 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            # cramjam reports a full buffer like any other failure; only a bigger buffer
            # tells them apart.
            if size >= cap:
                raise TooLarge(f"decompressed data exceeds {limit} bytes") from exc
            size = min(cap, size * 2)
            continue
        if n < size:
            return bytes(memoryview(out)[:n])
        if size >= cap:
            raise TooLarge(f"decompressed data exceeds {limit} bytes")
        size = min(cap, size * 2)


def _snappy_decompress_bounded(data: bytes, limit: int) -> bytes:
    blocks: list[bytes] = []
    if data.startswith(_XERIAL_MAGIC):
        pos = 16
        while pos < len(data):
            if pos + 4 > len(data):
                raise cramjam.DecompressionError("truncated xerial snappy block")
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0 or pos + size > len(data):
                raise cramjam.DecompressionError("xerial snappy block out of bounds")
            blocks.append(data[pos : pos + size])
            pos += size
    else:
        blocks.append(data)
    total = 0
    for block in blocks:  # each raw block declares its length up front: check before work
        total += cramjam.snappy.decompress_raw_len(block)
        if total > limit:
            raise TooLarge(f"decompressed data exceeds {limit} bytes")
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        return _snappy_decompress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise UnknownCodec(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``level``: the codec's level (None: its default; snappy has none)."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level))
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data, level))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level))
    raise UnknownCodec(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic, version, compatible version
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos : pos + size])
        pos += size
    return bytes(out)


def _snappy_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), _XERIAL_BLOCK):
        chunk = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


# An honest batch is at most max.message.bytes (1 MiB by default) compressed, and clients
# compress a few times at best; 64 MiB leaves room for extreme ratios while a decompression
# bomb (a few KiB of zstd claiming gigabytes) costs the broker this much memory and no more.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# After a batch this large the scratch pages are handed back, so one big batch does not keep
# the broker's RSS up.
_RELEASE_AFTER = 8 * 1024 * 1024
_SNAPPY_HEADER = 16  # xerial magic (8), version (4), compatible version (4)
_I32 = struct.Struct(">i")


class DecompressionFailed(ValueError):
    """The bytes do not decode with the batch's codec: corrupt, truncated or trailing junk."""


class DecompressedTooLarge(ValueError):
    """The batch decompresses to more than the limit."""


class _Scratch:
    """One anonymous mapping reused for every batch: pages are only touched (made resident)
    as far as a batch's records reach, and nothing is allocated per batch. The produce path
    validates synchronously on the event loop, so one buffer per process is enough."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._map: mmap.mmap | None = None
        self.view: memoryview | None = None

    def get(self) -> memoryview:
        if self.view is None:
            self._map = mmap.mmap(-1, self.size)
            self.view = memoryview(self._map)
        return self.view

    def release_pages(self) -> None:
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)


_SCRATCH = _Scratch(MAX_DECOMPRESSED_BYTES)
_ZSTD = zstandard.ZstdDecompressor()


def decompress_bounded(codec: int, data: bytes | memoryview) -> memoryview:
    """The records section of a compressed batch, decoded (gzip, snappy, zstd) into the
    shared scratch buffer or (lz4) into bytes of its own.

    The view is valid until the next call (callers walk it and drop it before yielding to
    the event loop). Raises DecompressedTooLarge past MAX_DECOMPRESSED_BYTES and
    DecompressionFailed for bytes the codec does not accept, including bytes after the end
    of the compressed stream: a Java consumer reads on after the last record and would fail
    there.
    """
    out = _SCRATCH.get()
    try:
        if codec == GZIP:
            n = cramjam.gzip.decompress_into(data, out)
        elif codec == LZ4:
            return _lz4(data)
        elif codec == ZSTD:
            n = _zstd_into(data, out)
        elif codec == SNAPPY:
            n = _snappy_into(memoryview(data), out)
        else:
            raise UnknownCodec(f"unknown compression codec {codec}")
    except cramjam.DecompressionError as exc:
        # cramjam writes into a fixed buffer and says so when the output does not fit
        # (std::io::ErrorKind::WriteZero); the unit tests pin this for every codec.
        if "whole buffer" in str(exc):
            _release()
            raise DecompressedTooLarge(_too_large()) from exc
        raise DecompressionFailed(f"{_NAMES[codec]} data does not decompress: {exc}") from exc
    if n > _RELEASE_AFTER:
        _release()
    return out[:n]


def _release() -> None:
    """Hand back the memory one large batch touched: the scratch pages, and the zstd
    context's window (libzstd keeps it for the next frame)."""
    global _ZSTD
    _SCRATCH.release_pages()
    _ZSTD = zstandard.ZstdDecompressor()


def _too_large() -> str:
    return f"records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes"


# No LZ4 sequence expands one input byte into more than 255 output bytes, so 256 times the
# compressed size (plus a block's slack) bounds any frame's output: asking for that much
# keeps the per-batch allocation small instead of reserving the whole limit every time.
_LZ4_MAX_RATIO = 256
_LZ4_SLACK = 64 * 1024


def _lz4(data: bytes | memoryview) -> memoryview:
    # liblz4 through python-lz4: ~1.5x faster than cramjam's lz4 on 16 KiB batches
    # (bench/validation.py's choices).
    bound = min(MAX_DECOMPRESSED_BYTES + 1, len(data) * _LZ4_MAX_RATIO + _LZ4_SLACK)
    decoder = lz4.frame.LZ4FrameDecompressor()
    try:
        out = decoder.decompress(data, max_length=bound)
    except RuntimeError as exc:  # python-lz4 reports liblz4's errors so
        raise DecompressionFailed(f"lz4 data does not decompress: {exc}") from exc
    if len(out) > MAX_DECOMPRESSED_BYTES:
        raise DecompressedTooLarge(_too_large())
    if not decoder.eof:
        raise DecompressionFailed("lz4 frame truncated (or expanding beyond what lz4 can)")
    if decoder.unused_data:
        # A Java consumer stops at the frame's end mark; librdkafka may not: refused.
        raise DecompressionFailed("bytes after the end of the lz4 frame")
    return memoryview(out)


def _zstd_into(data: bytes | memoryview, out: memoryview) -> int:
    # zstandard (libzstd) reuses one decompression context; cramjam makes one per call, which
    # costs ~2x on a producer's usual 16 KiB batch. read_across_frames: Java writes one
    # stream that may hold several frames, and junk after a frame must fail, not be ignored.
    try:
        reader = _ZSTD.stream_reader(data, read_across_frames=True, closefd=False)
        n = 0
        while n < len(out):
            got = reader.readinto(out[n:])
            if not got:
                return n
            n += got
        if reader.read(1):
            _release()
            raise DecompressedTooLarge(_too_large())
        return n
    except zstandard.ZstdError as exc:
        raise DecompressionFailed(f"zstd data does not decompress: {exc}") from exc


def _snappy_into(data: memoryview, out: memoryview) -> int:
    if data[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _snappy_block_into(data, out, 0)  # raw snappy (librdkafka may write it)
    if len(data) < _SNAPPY_HEADER:
        raise DecompressionFailed("truncated xerial snappy header")
    pos, n = _SNAPPY_HEADER, 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise DecompressionFailed("truncated xerial snappy block length")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size <= 0 or size > len(data) - pos:
            raise DecompressionFailed(f"xerial snappy block length {size} out of bounds")
        n = _snappy_block_into(data[pos : pos + size], out, n)
        pos += size
    return n


def _snappy_block_into(block: memoryview, out: memoryview, n: int) -> int:
    # A raw snappy block starts with its decoded length: checked before anything is written.
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise DecompressionFailed(f"snappy data does not decompress: {exc}") from exc
    if size > len(out) - n:
        raise DecompressedTooLarge(_too_large())
    written = cramjam.snappy.decompress_raw_into(block, out[n : n + size])
    if written != size:
        raise DecompressionFailed("snappy block shorter than its declared length")
    return n + written


_NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
