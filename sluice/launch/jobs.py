"""The PySpark jobs scheduler as a child of ``sluice dev`` (``--jobs-every SECONDS``).

Opt-in: the embedded default then merges small objects and compacts ``cleanup.policy=compact``
topics on its own. The jobs run in a child process (``sluice jobs schedule``) rather than in
the broker's: a Spark driver and its JVM would otherwise share the broker's event loop and
memory. The child reads the same data directory (topics from the embedded controller's log,
batches from SQLite, objects from the local store); every swap it makes is checked against
the coordinator, so it never races the broker into an inconsistent log. Its output goes to
``<data-dir>/jobs.log``; it stops with the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

from .process import sluice_command

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0


class ScheduledJobs:
    def __init__(self, data_dir: str, every_s: float) -> None:
        self.data_dir = data_dir
        self.every_s = every_s
        self.log_path = Path(data_dir) / "jobs.log"
        self._proc: asyncio.subprocess.Process | None = None

    def command(self) -> list[str]:
        every = f"{self.every_s:g}"
        return [
            *sluice_command(),
            "jobs",
            "schedule",
            "--data-dir",
            self.data_dir,
            "--merge-every",
            every,
            "--compact-every",
            every,
        ]

    async def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # a Ctrl-C meant for the broker is passed on by stop()
            )
        log.info(
            "jobs scheduler started (pid %d): merge and compact every %g s, log in %s",
            self._proc.pid,
            self.every_s,
            self.log_path,
        )

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("jobs scheduler did not stop within %.0f s; killing it", STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
