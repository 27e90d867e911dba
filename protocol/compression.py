"""Record batch compression codecs (attributes bits 0-2): none, gzip, snappy, lz4, zstd.

Only code that looks inside batches needs this: ListOffsets by timestamp (record_scan.py),
the compaction job (jobs/decode.py) and, for topics whose ``compression.type`` names a codec,
the broker-side recompression of produced batches (broker/recompress.py). Otherwise the
produce and fetch paths never decompress.
"""

from __future__ import annotations

import struct

import cramjam

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


def decompress_bounded(codec: int, data: bytes, limit: int) -> bytes:
    """Like :func:`decompress`, but never produces (or allocates) more than ``limit``
    bytes: data a client sent is decompressed into a buffer that grows by doubling up to
    the bound, and the codec stops when the buffer is full."""
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
