"""The metadata image from a controller's data directory, read without running it.

For readers outside the controller process that need the cluster's topics and cannot (or
need not) reach a controller's API: the PySpark jobs on a ``sluice dev`` data directory,
running or stopped. The directory is only read (controller/raft/storage.read_persisted),
and the image is built by the same state machine the controller applies entries with.
"""

from __future__ import annotations

from pathlib import Path

from .image import MetadataImage
from .raft.storage import LOG_FILE, read_persisted, read_voters
from .state import MetadataStateMachine


def raft_dir(path: str | Path) -> Path | None:
    """The Raft directory of a controller data directory (or of that Raft directory
    itself); None when there is none."""
    path = Path(path)
    for candidate in (path / "raft", path):
        if (candidate / LOG_FILE).exists():
            return candidate
    return None


def read_image(path: str | Path) -> MetadataImage:
    """The image of every committed entry. With a single voter every persisted entry is
    committed (its own write is the quorum) even if the commit index on disk lags."""
    directory = raft_dir(path)
    if directory is None:
        raise FileNotFoundError(f"no controller metadata log under {path}")
    state = read_persisted(directory)
    _node, voters = read_voters(directory)
    machine = MetadataStateMachine()
    if state.snapshot is not None:
        machine.restore(state.snapshot)
    last = state.base_index + len(state.entries)
    commit = last if len(voters) == 1 else state.hard_state.commit
    for entry in state.entries:
        if machine.applied < entry.index <= commit:
            machine.apply(entry)
    return machine.image
