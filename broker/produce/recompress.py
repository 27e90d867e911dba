"""Broker-side recompression: a topic whose ``compression.type`` names a codec stores its
batches in that codec whatever the producer used, as Kafka does ('producer', the default,
keeps batches as sent; 'uncompressed' stores them uncompressed).

A batch's records section is decompressed and compressed whole, in C (cramjam): no
per-record Python work. Decompression is bounded (``socket.request.max.bytes``), so a
compression bomb is refused instead of filling memory. Topics left at 'producer' cost
nothing per request: the produce handler caches a topic's target with its other settings.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

import crc32c
from kio.schema.errors import ErrorCode

from protocol.compression import (
    CODEC_MASK,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    TooLarge,
    compress,
    decompress_limited,
)
from protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecords,
)

CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_LEVEL_KEYS = {
    GZIP: "compression.gzip.level",
    LZ4: "compression.lz4.level",
    ZSTD: "compression.zstd.level",
}
_LENGTH = struct.Struct(">i")  # batchLength, at offset 8
_ATTRS = struct.Struct(">h")
_CRC = struct.Struct(">I")


@dataclass(frozen=True)
class Target:
    codec: int
    level: int | None  # None: the codec's default


def target(configs: Mapping[str, str]) -> Target | None:
    """The codec a topic whose effective configs are ``configs`` stores batches in, None
    when it keeps the producer's (the produce handler caches it per topic)."""
    codec = CODECS.get(configs["compression.type"].strip())
    if codec is None:
        return None
    level_key = _LEVEL_KEYS.get(codec)
    level = int(configs[level_key].strip()) if level_key else None
    return Target(codec, None if level == -1 else level)


def recompress(
    records: memoryview,
    batches: list[BatchHeader],
    to: Target,
    max_batch_bytes: int,
    max_decompressed_bytes: int,
) -> tuple[memoryview, list[BatchHeader]]:
    """The partition's records with every batch in ``to``'s codec, and their headers.
    Batches already in it (and control batches) are copied unchanged; the original is
    returned when there is nothing to do. Raises InvalidRecords for undecodable data, a
    batch that decompresses past ``max_decompressed_bytes`` or one that ends up larger
    than ``max_batch_bytes``."""
    if all(b.attributes & CODEC_MASK == to.codec or b.is_control for b in batches):
        return records, batches
    out = bytearray()
    headers: list[BatchHeader] = []
    for b in batches:
        batch = records[b.offset : b.offset + b.size]
        start = len(out)
        codec = b.attributes & CODEC_MASK
        if codec == to.codec or b.is_control:
            out += batch
            headers.append(b._replace(offset=start))
            continue
        try:
            body = decompress_limited(codec, bytes(batch[HEADER_SIZE:]), max_decompressed_bytes)
        except TooLarge as exc:
            raise InvalidRecords(
                ErrorCode.invalid_record, f"record batch decompresses too large: {exc}"
            ) from None
        except Exception as exc:  # cramjam's errors, an unknown codec number
            raise InvalidRecords(
                ErrorCode.corrupt_message, f"record batch cannot be decompressed: {exc}"
            ) from None
        packed = compress(to.codec, body, to.level)
        size = HEADER_SIZE + len(packed)
        if size > max_batch_bytes:
            raise InvalidRecords(
                ErrorCode.message_too_large,
                f"record batch of {size} bytes after recompression exceeds "
                f"max.message.bytes {max_batch_bytes}",
            )
        attributes = (b.attributes & ~CODEC_MASK) | to.codec
        out += batch[:HEADER_SIZE]
        out += packed
        _LENGTH.pack_into(out, start + 8, size - LOG_OVERHEAD)
        _ATTRS.pack_into(out, start + ATTRIBUTES_OFFSET, attributes)
        crc = crc32c.crc32c(memoryview(out)[start + ATTRIBUTES_OFFSET : start + size])
        _CRC.pack_into(out, start + CRC_OFFSET, crc)
        headers.append(b._replace(offset=start, size=size, attributes=attributes))
    return memoryview(bytes(out)), headers
