"""Writes that survive power loss: the two primitives every durable file here is built from.

Used by the local object store (objects) and the Raft log storage (log, snapshots, hard state).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def write_all(fd: int, chunks: Sequence[bytes | memoryview]) -> None:
    """writev the chunks without joining them, coping with short writes."""
    views = [memoryview(c).cast("B") for c in chunks]
    views = [v for v in views if len(v)]
    i = 0
    while i < len(views):
        written = os.writev(fd, views[i : i + _IOV_MAX])
        # Skip the buffers written whole, trim the one written in part.
        while written and i < len(views):
            n = len(views[i])
            if written >= n:
                written -= n
                i += 1
            else:
                views[i] = views[i][written:]
                written = 0


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable (the file's own fsync is not)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
