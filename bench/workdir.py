"""The scratch directory of one bench run, shared by ``bench.run`` and the phases it can
also start on their own (``bench.scale_out``)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    d.chmod(0o755)  # PostgreSQL runs as its own user and must reach its directory
    try:
        yield d
    finally:
        if keep:
            print(f"kept {d}", flush=True)
        else:
            shutil.rmtree(d, ignore_errors=True)
