"""Object store on a local directory (the embedded default, and tests).

Atomicity comes from write-to-temp + rename in the same directory: a reader sees the
whole object at its key or nothing. Durability needs both the file's and the
directory's fsync, otherwise a power loss can forget the rename (or the file's data)
after put() has returned and the coordinator has committed offsets pointing at it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from storage.durable import fsync_dir, write_all
from storage.objects import Chunks, ObjectNotFound, ObjectStore, StoredObject

# writev takes at most IOV_MAX buffers per call.
_TMP_MARK = ".tmp-"
LIST_PAGE = 1000


class LocalObjectStore(ObjectStore):
    def __init__(self, root: str) -> None:
        self._root = Path(root).resolve()

    async def start(self) -> None:
        await asyncio.to_thread(self._root.mkdir, parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        # Keys come from our own naming, but a key must never escape the root.
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"invalid object key: {key!r}")
        if _TMP_MARK in parts[-1]:
            raise ValueError(f"object key may not contain {_TMP_MARK!r}: {key!r}")
        return self._root.joinpath(*parts)

    async def put(self, key: str, chunks: Chunks) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._put, path, chunks)

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length}")
        path = self._path(key)
        return await asyncio.to_thread(_read_range, path, key, offset, length)

    async def delete_many(self, keys: Sequence[str]) -> None:
        paths = [self._path(k) for k in keys]
        await asyncio.to_thread(_unlink_all, paths)

    async def list_objects(self) -> AsyncIterator[list[StoredObject]]:
        page = await asyncio.to_thread(self._list)
        for start in range(0, len(page), LIST_PAGE):
            yield page[start : start + LIST_PAGE]

    def _list(self) -> list[StoredObject]:
        out = []
        for directory, _dirs, files in os.walk(self._root):
            for name in files:
                if _TMP_MARK in name:
                    continue  # a write in progress (or torn by a crash): not an object
                path = Path(directory, name)
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                key = path.relative_to(self._root).as_posix()
                out.append(StoredObject(key, st.st_size, st.st_mtime_ns // 1_000_000))
        return out

    def _put(self, path: Path, chunks: Chunks) -> None:
        self._make_dirs(path.parent)
        tmp = path.with_name(f".{path.name}{_TMP_MARK}{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                write_all(fd, chunks)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)

    def _make_dirs(self, directory: Path) -> None:
        """mkdir -p that also fsyncs each parent whose entries it changed."""
        missing = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # a concurrent put made it
            fsync_dir(d.parent)


def _read_range(path: Path, key: str, offset: int, length: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ObjectNotFound(key) from None
    try:
        data = os.pread(fd, length, offset)
        if len(data) == length or not data:
            return data
        # pread may return less than asked before EOF (huge reads); gather the rest.
        parts = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)
    finally:
        os.close(fd)


def _unlink_all(paths: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)
