"""One process per data directory.

Two processes on one directory corrupt it quietly: a second `sluice dev` opened the
first one's Raft log and voted in it before failing on the port. So every broker and
controller takes an exclusive lock on ``<data dir>/.lock`` before it reads or writes
anything there. The lock is an ``flock`` on an open file: the kernel drops it when the
process dies however it dies (SIGKILL included), so a restarted process never finds a
stale lock to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".lock"


class DataDirInUse(Exception):
    pass


class DataDirLock:
    """Held from :func:`lock_data_dir` until :meth:`release` or the process ends."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_data_dir(data_dir: str | os.PathLike[str]) -> DataDirLock:
    """Create ``data_dir`` if needed and lock it; raises DataDirInUse (naming the holder)
    when another process has it, NotADirectoryError / OSError when it cannot be used."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = ""
        with contextlib.suppress(OSError, ValueError):
            holder = os.pread(fd, 32, 0).decode().strip()
        os.close(fd)
        raise DataDirInUse(
            f"data directory {directory} is in use by another process"
            + (f" (pid {holder})" if holder else "")
            + "; stop it first or choose another directory"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    # The pid is only for the message above; the lock itself is the flock.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DataDirLock(path, fd)
