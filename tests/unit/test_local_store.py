"""LocalObjectStore: atomic, durable whole-object writes and ranged reads on a directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.objects import ObjectNotFound
from storage.objects.local import LocalObjectStore


@pytest.fixture
async def store(tmp_path: Path) -> LocalObjectStore:
    s = LocalObjectStore(str(tmp_path / "objects"))
    await s.start()
    return s


def all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_put_chunks_and_read_ranges(store: LocalObjectStore) -> None:
    data = bytes(range(256)) * 4
    chunks = [data[:100], memoryview(data)[100:101], bytearray(data[101:700]), b"", data[700:]]
    await store.put("a/b/c.obj", chunks)
    assert await store.get_range("a/b/c.obj", 0, len(data)) == data
    assert await store.get_range("a/b/c.obj", 10, 5) == data[10:15]
    assert await store.get_range("a/b/c.obj", 1000, 100) == data[1000:]  # short at the end
    assert await store.get_range("a/b/c.obj", 5000, 10) == b""
    assert await store.get_range("a/b/c.obj", 3, 0) == b""


async def test_many_chunks_and_short_writes(
    store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = [bytes([i % 251]) * 7 for i in range(3000)]  # more than IOV_MAX buffers
    real_writev = os.writev

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        # Write only part of what was asked, as the kernel may.
        first = buffers[0]
        return real_writev(fd, [first[: max(1, len(first) // 2)]])

    monkeypatch.setattr(os, "writev", short_writev)
    await store.put("k", chunks)
    monkeypatch.undo()
    assert await store.get_range("k", 0, 1 << 20) == b"".join(chunks)


async def test_missing_object(store: LocalObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        await store.get_range("nope", 0, 1)
    with pytest.raises(ObjectNotFound):
        await store.get_range("dir/nope", 0, 1)


async def test_delete_many_ignores_missing(store: LocalObjectStore, tmp_path: Path) -> None:
    await store.put("x/1", [b"one"])
    await store.put("x/2", [b"two"])
    await store.delete_many(["x/1", "x/404", "nowhere/at/all"])
    with pytest.raises(ObjectNotFound):
        await store.get_range("x/1", 0, 3)
    assert await store.get_range("x/2", 0, 3) == b"two"


async def test_failed_put_leaves_nothing_at_the_key(
    store: LocalObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put("obj", [b"old contents"])
    real_writev = os.writev
    calls = 0

    def failing_writev(fd: int, buffers: list[memoryview]) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError(28, "No space left on device")
        return real_writev(fd, buffers[:1])  # some bytes really reach the temp file

    monkeypatch.setattr(os, "writev", failing_writev)
    with pytest.raises(OSError):
        await store.put("obj", [b"new ", b"contents ", b"never whole"])
    with pytest.raises(OSError):
        await store.put("fresh", [b"partial ", b"data"])
    monkeypatch.undo()
    # The old object is still whole; the new key never appeared; no temp file is left.
    assert await store.get_range("obj", 0, 100) == b"old contents"
    with pytest.raises(ObjectNotFound):
        await store.get_range("fresh", 0, 1)
    assert all_files(tmp_path / "objects") == ["obj"]


async def test_failed_fsync_publishes_nothing(
    store: LocalObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        await store.put("k", [b"data"])
    monkeypatch.undo()
    with pytest.raises(ObjectNotFound):
        await store.get_range("k", 0, 4)
    assert all_files(tmp_path / "objects") == []


async def test_put_fsyncs_file_and_directory(
    store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    await store.put("k", [b"data"])
    assert synced == [False, True]  # the file, then the directory holding the rename


async def test_overwrite_replaces_whole_object(store: LocalObjectStore) -> None:
    await store.put("k", [b"a much longer first version"])
    await store.put("k", [b"short"])
    assert await store.get_range("k", 0, 100) == b"short"


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "../x", "a//b", "a/./b", "x.tmp-1"])
async def test_keys_cannot_escape_the_root(store: LocalObjectStore, bad: str) -> None:
    with pytest.raises(ValueError):
        await store.put(bad, [b"x"])


async def test_list_objects_skips_writes_in_progress(
    store: LocalObjectStore, tmp_path: Path
) -> None:
    await store.put("a/one", [b"1"])
    await store.put("two", [b"22"])
    # A temp file left by a crash mid-put is not an object.
    (tmp_path / "objects" / ".three.tmp-abc").write_bytes(b"333")
    os.utime(tmp_path / "objects" / "two", (1_000_000, 1_000_000))
    listed = [o async for page in store.list_objects() for o in page]
    assert sorted((o.key, o.size) for o in listed) == [("a/one", 1), ("two", 2)]
    assert next(o for o in listed if o.key == "two").modified_ms == 1_000_000_000
