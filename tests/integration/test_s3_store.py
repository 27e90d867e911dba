"""S3ObjectStore against a real S3 server (see tests/fixtures/s3.py): no mocks, the
server checks signatures, ranges and keys as production S3 would."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import ClientCreatorContext, get_session

from sluice.launch.seaweedfs import LocalSeaweedFS, SeaweedFSError
from storage.objects import ObjectNotFound, ObjectStoreError
from storage.objects.block_cache import BlockCache
from storage.objects.s3 import S3ObjectStore
from tests.fixtures.s3 import S3Server

KiB = 1024
MiB = 1024 * KiB


async def test_put_then_ranged_reads(s3_store: S3ObjectStore) -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    # Chunks of every kind the append path hands over, an empty one included.
    chunks = [data[:1000], memoryview(data)[1000:5000], b"", bytearray(data[5000:])]
    await s3_store.put("obj", chunks)

    assert await s3_store.get_range("obj", 0, len(data)) == data
    assert await s3_store.get_range("obj", 1234, 4321) == data[1234 : 1234 + 4321]
    assert await s3_store.get_range("obj", len(data) - 10, 10) == data[-10:]
    # Short at the end, empty from the end on; nothing at all asked: nothing sent.
    assert await s3_store.get_range("obj", len(data) - 10, 100) == data[-10:]
    assert await s3_store.get_range("obj", len(data), 10) == b""
    assert await s3_store.get_range("obj", len(data) + 5000, 10) == b""
    gets = s3_store.gets
    assert await s3_store.get_range("obj", 5, 0) == b""
    assert s3_store.gets == gets
    with pytest.raises(ValueError):
        await s3_store.get_range("obj", -1, 10)


async def test_empty_object(s3_store: S3ObjectStore) -> None:
    await s3_store.put("empty", [])
    assert await s3_store.get_range("empty", 0, 100) == b""


async def test_overwrite_is_whole(s3_store: S3ObjectStore) -> None:
    await s3_store.put("k", [b"a" * 100])
    await s3_store.put("k", [b"b" * 10])
    assert await s3_store.get_range("k", 0, 1000) == b"b" * 10


async def test_large_object_from_many_chunks(s3_store: S3ObjectStore) -> None:
    chunks = [os.urandom(64 * KiB) for _ in range(128)]  # 8 MiB, a full flush
    data = b"".join(chunks)
    await s3_store.put("big", chunks)
    assert await s3_store.get_range("big", 0, 16 * MiB) == data
    # A range across chunk boundaries, as a fetch of one batch would read it.
    lo = 3 * 64 * KiB - 17
    assert await s3_store.get_range("big", lo, 200 * KiB) == data[lo : lo + 200 * KiB]
    assert s3_store.bytes_put == len(data)


async def test_key_prefix_is_respected(s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket()
    prefixed = S3ObjectStore(s3_server.config(bucket, key_prefix="/cluster-a/objects/"))
    plain = S3ObjectStore(s3_server.config(bucket))
    await prefixed.start()
    await plain.start()
    try:
        await prefixed.put("k1", [b"one"])
        await prefixed.put("k2", [b"two"])
        await plain.put("k3", [b"three"])
        assert await prefixed.get_range("k1", 0, 10) == b"one"
        with pytest.raises(ObjectNotFound):
            await plain.get_range("k1", 0, 10)

        # What is really in the bucket, seen by a client that knows nothing of prefixes.
        async with _raw_client(s3_server) as raw:
            listed = await raw.list_objects_v2(Bucket=bucket)
        keys = sorted(o["Key"] for o in listed.get("Contents", []))
        assert keys == ["cluster-a/objects/k1", "cluster-a/objects/k2", "k3"]
        # Listing shows the store's own keys only, with sizes and recent times.
        listed_keys = [o async for page in prefixed.list_objects() for o in page]
        assert sorted((o.key, o.size) for o in listed_keys) == [("k1", 3), ("k2", 3)]
        assert all(abs(o.modified_ms - time.time() * 1000) < 600_000 for o in listed_keys)

        await prefixed.delete_many(["k1", "k3"])  # k3 is outside the prefix: untouched
        assert await plain.get_range("k3", 0, 10) == b"three"
        with pytest.raises(ObjectNotFound):
            await prefixed.get_range("k1", 0, 10)
    finally:
        await prefixed.close()
        await plain.close()


async def test_missing_object_is_not_found_and_not_retried(s3_store: S3ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        await s3_store.get_range("no-such-object", 0, 10)
    assert s3_store.gets == 1
    assert s3_store.retries == 0


async def test_missing_bucket_is_an_error_not_a_missing_object(s3_server: S3Server) -> None:
    store = S3ObjectStore(s3_server.config("sluice-test-no-such-bucket"))
    await store.start()
    try:
        with pytest.raises(ObjectStoreError) as info:
            await store.get_range("k", 0, 10)
        assert not isinstance(info.value, ObjectNotFound)
        assert store.retries == 0
    finally:
        await store.close()


async def test_wrong_secret_fails_at_once(s3_server: S3Server) -> None:
    store = S3ObjectStore(s3_server.config(s3_server.new_bucket(), secret_key="wrong"))
    await store.start()
    try:
        with pytest.raises(ObjectStoreError):
            await store.put("k", [b"x"])
        assert store.retries == 0
    finally:
        await store.close()


async def test_create_bucket_on_start_is_idempotent(s3_server: S3Server) -> None:
    bucket = f"sluice-test-made-{os.urandom(6).hex()}"
    s3_server.created.append(bucket)  # removed at session end on shared servers
    for _ in range(2):
        store = S3ObjectStore(s3_server.config(bucket, create_bucket=True))
        await store.start()
        try:
            await store.put("k", [b"v"])
            assert await store.get_range("k", 0, 1) == b"v"
        finally:
            await store.close()


async def test_delete_many_in_batches(s3_server: S3Server) -> None:
    store = S3ObjectStore(s3_server.config(s3_server.new_bucket(), delete_batch=7))
    await store.start()
    try:
        keys = [f"obj-{i:03d}" for i in range(24)]
        await asyncio.gather(*(store.put(k, [k.encode()]) for k in keys))
        # Missing keys mixed in are fine.
        await store.delete_many([*keys[:20], "never-written-1", "never-written-2"])
        assert store.deletes == 4  # 22 keys in batches of 7
        for k in keys[:20]:
            with pytest.raises(ObjectNotFound):
                await store.get_range(k, 0, 10)
        for k in keys[20:]:
            assert await store.get_range(k, 0, 10) == k.encode()
        await store.delete_many([])
        assert store.deletes == 4
    finally:
        await store.close()


async def test_delete_many_over_the_s3_limit(s3_store: S3ObjectStore) -> None:
    # 1100 keys: two DeleteObjects requests (S3 takes at most 1000 keys in one), most
    # of them for objects that never existed, which is not an error.
    written = [f"w-{i}" for i in range(0, 1100, 100)]
    await asyncio.gather(*(s3_store.put(k, [b"x"]) for k in written))
    keys = [f"w-{i}" for i in range(1100)]
    await s3_store.delete_many(keys)
    assert s3_store.deletes == 2
    for k in written:
        with pytest.raises(ObjectNotFound):
            await s3_store.get_range(k, 0, 1)


async def test_attempt_timeout_is_bounded(s3_server: S3Server) -> None:
    cfg = s3_server.config(
        s3_server.new_bucket(),
        op_timeout_s=0.001,  # no 4 MiB PUT makes it in a millisecond
        max_attempts=3,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
    )
    store = S3ObjectStore(cfg)
    await store.start()
    try:
        started = time.monotonic()
        with pytest.raises(ObjectStoreError, match="timed out"):
            await store.put("slow", [b"x" * (4 * MiB)])
        assert time.monotonic() - started < 2.0
        assert store.puts == 3
        assert store.retries == 2
    finally:
        await store.close()


@pytest.fixture
def local_s3(s3_server: S3Server) -> Iterator[S3Server]:
    """The session's server, for tests that stop it; it is running again afterwards."""
    if s3_server.local is None:
        pytest.skip(f"cannot stop the S3 server of source {s3_server.source!r}")
    try:
        yield s3_server
    finally:
        if not s3_server.local.is_running():
            s3_server.local.start()


async def test_outage_fails_within_bound_then_recovers(
    local_s3: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    assert local_s3.local is not None
    cfg = local_s3.config(
        local_s3.new_bucket(),
        op_timeout_s=2.0,
        connect_timeout_s=0.5,
        max_attempts=3,
        backoff_base_s=0.05,
        backoff_max_s=0.2,
    )
    store = S3ObjectStore(cfg)
    await store.start()
    try:
        await store.put("before", [b"written before the outage"])
        await asyncio.to_thread(local_s3.local.stop)

        caplog.set_level(logging.DEBUG, logger="storage.objects.s3")
        for operation in (
            store.put("during", [b"x" * 1000]),
            store.get_range("before", 0, 100),
            store.delete_many(["before"]),
        ):
            started = time.monotonic()
            with pytest.raises(ObjectStoreError) as info:
                await operation
            elapsed = time.monotonic() - started
            assert not isinstance(info.value, ObjectNotFound)
            assert "after 3 attempts" in str(info.value)
            # Refused connections fail fast: the backoff is all the time spent. The
            # bound the config promises holds with room to spare.
            assert elapsed < 1.5 < cfg.worst_case_s
        retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
        assert len(retries) == 6  # two per operation, each a DEBUG line
        assert all(r.levelno == logging.DEBUG for r in retries)
        # An outage is one WARNING when it starts (issue 24: not a line per attempt).
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage().split(":")[0] for r in warnings] == ["object store requests"]
        assert "a dependency is unavailable" in warnings[0].getMessage()

        await asyncio.to_thread(local_s3.local.start)
        # The same store object works again, over new connections.
        assert await store.get_range("before", 0, 100) == b"written before the outage"
        # ... and one INFO says so.
        back = [r for r in caplog.records if "works again" in r.getMessage()]
        assert [r.levelno for r in back] == [logging.INFO]
        await store.put("after", [b"after"])
        assert await store.get_range("after", 0, 100) == b"after"
    finally:
        await store.close()


async def test_put_rides_out_a_short_outage(local_s3: S3Server) -> None:
    assert local_s3.local is not None
    weed = local_s3.local
    cfg = local_s3.config(
        local_s3.new_bucket(),
        op_timeout_s=2.0,
        connect_timeout_s=0.5,
        max_attempts=100,  # ~10 s of attempts: room for a slow start on a busy machine
        backoff_base_s=0.05,
        backoff_max_s=0.2,
    )
    store = S3ObjectStore(cfg)
    await store.start()
    try:
        await store.put("warm", [b"x"])  # a pooled connection the outage will break
        await asyncio.to_thread(weed.stop)
        # Back after ~0.5 s plus its start time, well inside the attempts' budget.
        restarter = threading.Timer(0.5, weed.start)
        restarter.start()
        try:
            await store.put("k", [b"made it"])
        finally:
            await asyncio.to_thread(restarter.join)
        assert store.retries > 0
        assert await store.get_range("k", 0, 100) == b"made it"
    finally:
        await store.close()


async def test_block_cache_over_s3(s3_store: S3ObjectStore) -> None:
    block = 64 * KiB
    cache = BlockCache(s3_store, block_size=block, max_bytes=16 * MiB)
    data = os.urandom(3 * block + 100)
    await s3_store.put("obj", [data])

    gets = s3_store.gets
    views = await cache.read("obj", block - 10, 20)  # spans blocks 0 and 1
    assert b"".join(views) == data[block - 10 : block + 10]
    assert s3_store.gets == gets + 2
    # Cached: the same and overlapping ranges do not go to S3 again.
    assert b"".join(await cache.read("obj", 0, 2 * block)) == data[: 2 * block]
    assert b"".join(await cache.read("obj", 5, 50)) == data[5:55]
    assert s3_store.gets == gets + 2
    # The short last block marks the object's end: reads past it ask S3 for nothing.
    assert b"".join(await cache.read("obj", 3 * block, 200)) == data[3 * block :]
    assert b"".join(await cache.read("obj", 3 * block + 50, 10 * block)) == data[-50:]
    assert s3_store.gets == gets + 3

    # What this broker just wrote is read back from memory (consumers at the tail).
    chunks = [os.urandom(40 * KiB) for _ in range(5)]
    fresh = b"".join(chunks)
    await s3_store.put("fresh", chunks)
    cache.put_object("fresh", chunks)
    gets = s3_store.gets
    assert b"".join(await cache.read("fresh", 0, len(fresh) + 100)) == fresh
    assert b"".join(await cache.read("fresh", 150 * KiB, 1000)) == fresh[150 * KiB :][:1000]
    assert s3_store.gets == gets

    # Concurrent misses of one block share one GET.
    cache2 = BlockCache(s3_store, block_size=block, max_bytes=16 * MiB)
    gets = s3_store.gets
    results = await asyncio.gather(*(cache2.read("obj", 100 + i, 10) for i in range(8)))
    assert [b"".join(r) for r in results] == [data[100 + i : 110 + i] for i in range(8)]
    assert s3_store.gets == gets + 1


def _raw_client(server: S3Server) -> ClientCreatorContext:
    return get_session().create_client(
        "s3",
        endpoint_url=server.endpoint_url,
        region_name=server.region,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        config=AioConfig(s3={"addressing_style": "path"}),
    )


def test_launcher_reports_a_failed_start(tmp_path: Path) -> None:
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\necho 'F1121 mini.go:1 cannot start: disk on fire' >&2\nexit 3\n")
    fake.chmod(0o755)
    weed = LocalSeaweedFS(tmp_path / "s3", binary=str(fake), ready_timeout_s=5)
    with pytest.raises(SeaweedFSError, match="disk on fire") as info:
        weed.start()
    assert "exited with 3" in str(info.value)
    assert not weed.is_running()
