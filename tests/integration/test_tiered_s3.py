"""Tiered storage against a real S3 server (tests/fixtures/s3.py): copy a classic log's
rolled segments, read every offset back through ranged GETs, delete them."""

from __future__ import annotations

import uuid
from pathlib import Path

from protocol.records import parse_batches
from storage.classic.log import Log, LogConfig
from storage.objects.block_cache import BlockCache
from storage.objects.s3 import S3ObjectStore
from storage.tiered import layout
from storage.tiered.copier import SegmentCopier, history_of
from storage.tiered.deleter import SegmentDeleter
from storage.tiered.lineage import lineage
from storage.tiered.metadata.sqlite import SqliteRemoteLogMetadata
from storage.tiered.reader import RemoteReader
from tests.e2e._batches import Record, build_batch

TOPIC = uuid.UUID(int=5)


async def test_copy_read_delete_on_s3(s3_store: S3ObjectStore, tmp_path: Path) -> None:
    log = Log(str(tmp_path / "log"), LogConfig(segment_bytes=4000, index_interval_bytes=500))
    for i in range(50):
        data = memoryview(
            build_batch([Record(b"k", b"v" * (50 + i)) for _ in range(2)], base_timestamp_ms=i)
        )
        log.append_as_leader(data, parse_batches(data, 1 << 30), i // 20)
    meta = SqliteRemoteLogMetadata(str(tmp_path / "coordinator.db"))
    await meta.start()
    try:
        copied = await SegmentCopier(s3_store, meta, broker_id=1).copy_rolled(
            log, TOPIC, 0, 2, log.log_end_offset
        )
        assert copied and lineage(history_of(log), copied).end == log.active.base_offset - 1
        reader = RemoteReader(s3_store, BlockCache(s3_store, block_size=1024))
        for s in copied:
            local = next(x for x in log.segments if x.base_offset == s.start_offset)
            for offset in range(s.start_offset, s.end_offset + 1, 3):
                assert await reader.read(s, offset, 700) == local.read(
                    offset, 700, s.end_offset + 1, True
                )
        assert await SegmentDeleter(s3_store, meta).delete_all(copied) == len(copied)
        assert await meta.list_segments(TOPIC, 0) == []
        left = [o.key async for page in s3_store.list_objects() for o in page]
        assert not set(left) & {k for s in copied for k in layout.keys(s)}
    finally:
        await meta.close()
        log.close()
