"""The product files one Produce and one Fetch request pass through (issue 26's closing note).

    scripts/request-path            # one broker, a diskless and a classic topic
    scripts/request-path --json     # the same, machine-readable

In one process: a real controller (ControllerService) and a real broker (Broker, SQLite
coordinator, local object store, all in a temporary directory). A diskless and a classic
topic are created and warmed up (a few produces and fetches, so that caches, sessions and
lazy imports are settled); then exactly one Produce and one Fetch per topic are sent over a
real socket by a blocking client on another thread, and the broker's event-loop thread is
profiled (``sys.setprofile``) while it handles them: from the frame's decode in the
connection's ``buffer_updated`` to the encoded answer written by ``_write_ready``.

What counts as the request's work: the call in which the connection decodes the frame, and
everything run on behalf of the request from its admission on. The latter is followed through
a context variable set in the connection's worker task when it admits the request: asyncio
copies the context into every task, timer and done-callback scheduled from there (the
diskless appender's flush timer and its upload-and-commit task included), so the work of
other connections and of background loops (heartbeats, replication, metrics) is left out.
Work handed to another thread (``asyncio.to_thread``: the SQLite coordinator's statements)
is not seen.

Counted: fresh calls (a coroutine's or generator's resumption after an ``await``/``yield`` is
not a new entry) of functions whose file is in a product package (PRODUCT_PACKAGES).
Consecutive calls within one file collapse into one entry; a file "entered twice" is one that
appears again after the request had moved on to another file.

A second, coarser figure (``stages``), derived from the same path and changing nothing in the
first: each file replaced by its package (broker's sub-packages, ``broker/server``,
``broker/produce``, ``broker/logs``, ...; ``broker`` for its loose modules; the other product
packages whole: ``protocol``, ``storage``, ...), consecutive entries collapsed again. It
counts how often a request crosses between the layers of the data-flow layout, whatever the
number of helper files within one. The issue's goal is stated in files: the first figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dis
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from bench.harness import record_batch

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("broker", "storage", "protocol", "controller", "common", "replication")
_PREFIXES = tuple(str(ROOT / p) + "/" for p in PRODUCT_PACKAGES)
_CONNECTION_FILE = str(ROOT / "broker" / "server" / "connection.py")
# A coroutine's or generator's frame starts at a RESUME whose argument is 0; it is resumed
# after a yield or an await at a RESUME whose argument says which (CPython 3.11).
_CO_COROUTINE_LIKE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable, async gen
_RESUME = dis.opmap["RESUME"]

PRODUCE_KEY, FETCH_KEY, CREATE_TOPICS_KEY = 0, 1, 19
PRODUCE_VERSION, FETCH_VERSION = 9, 12
SECRET = "request-path"

_ON_BEHALF: contextvars.ContextVar[bool] = contextvars.ContextVar("request_path", default=False)


@dataclass
class RequestPath:
    """One request's path: the files entered, in order, as paths relative to the repo."""

    request: str
    topic_kind: str
    files: list[str]
    calls: int
    functions: list[list[str]]  # per entry of ``files``: the functions called there, in order

    @property
    def distinct(self) -> int:
        return len(set(self.files))

    @property
    def reentered(self) -> list[str]:
        return _reentered(self.files)

    @property
    def stages(self) -> list[str]:
        """The path by package (the second figure): consecutive entries collapsed."""
        out: list[str] = []
        for name in self.files:
            stage = stage_of(name)
            if not out or out[-1] != stage:
                out.append(stage)
        return out

    def as_dict(self) -> dict[str, Any]:
        stages = self.stages
        return {
            **asdict(self),
            "entries": len(self.files),
            "distinct": self.distinct,
            "reentered": self.reentered,
            "stages": stages,
            "stage_entries": len(stages),
            "stage_distinct": len(set(stages)),
            "stages_reentered": _reentered(stages),
        }

    def render(self, functions: bool = False) -> str:
        lines = [
            f"{self.request} on a {self.topic_kind} topic: {self.distinct} distinct files, "
            f"{len(self.files)} entries, {len(self.reentered)} entered more than once "
            f"({self.calls} calls)"
        ]
        for i, name in enumerate(self.files, 1):
            called = f"  ({', '.join(self.functions[i - 1])})" if functions else ""
            lines.append(f"  {i:3d} {name}{called}")
        if self.reentered:
            counts = {n: self.files.count(n) for n in self.reentered}
            lines.append(
                "  entered more than once: " + ", ".join(f"{n} x{c}" for n, c in counts.items())
            )
        stages = self.stages
        lines.append(
            f"  by package: {len(set(stages))} distinct, {len(stages)} entries, "
            f"{len(_reentered(stages))} entered more than once: " + " > ".join(stages)
        )
        return "\n".join(lines)


def stage_of(path: str) -> str:
    """A product file's package: broker's sub-package (``broker`` for its loose modules),
    else its top-level package."""
    parts = path.split("/")
    if parts[0] == "broker":
        return "/".join(parts[:2]) if len(parts) > 2 else "broker"
    return parts[0]


def _reentered(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
    return sorted(name for name, n in seen.items() if n > 1)


class _Tracer:
    """A profile function that records the product files entered on behalf of one request
    of the connection from client port ``port``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.files: list[str] = []  # collapsed
        self.functions: list[list[str]] = []
        self.calls = 0
        self._decoding = 0  # depth inside our connection's buffer_updated

    def _ours(self, frame: FrameType) -> bool:
        conn = frame.f_locals.get("self")
        peer = getattr(conn, "_peer", None)
        return peer is not None and peer[1] == self.port

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "return":
            code = frame.f_code
            if (
                self._decoding
                and code.co_name == "buffer_updated"
                and code.co_filename == _CONNECTION_FILE
                and self._ours(frame)
            ):
                self._decoding -= 1
            return
        if event != "call":
            return
        code = frame.f_code
        filename = code.co_filename
        if not filename.startswith(_PREFIXES):
            return
        if code.co_flags & _CO_COROUTINE_LIKE:
            at = frame.f_lasti
            if code.co_code[at] == _RESUME and code.co_code[at + 1] != 0:
                return  # a resumption, not a call
        if filename == _CONNECTION_FILE and not self._decoding:
            name = code.co_name
            if name == "buffer_updated" and self._ours(frame):
                self._decoding += 1
            elif name == "_admit" and self._ours(frame):
                _ON_BEHALF.set(True)  # in the worker task's context: inherited from here on
        if not (self._decoding or _ON_BEHALF.get()):
            return
        self.calls += 1
        relative = filename[len(str(ROOT)) + 1 :]
        if not self.files or self.files[-1] != relative:
            self.files.append(relative)
            self.functions.append([])
        called = self.functions[-1]
        if not called or called[-1] != code.co_qualname:
            called.append(code.co_qualname)


def _records(count: int = 3) -> bytes:
    return record_batch([(b"key-%d" % i, b"value-%d" % i) for i in range(count)])


def _produce(topic: str) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": _records()}]}],
    }


def _fetch(topic: str, offset: int) -> dict[str, Any]:
    from bench.kafka_wire import fetch_body

    return fetch_body(topic, 0, offset, 1 << 20, min_bytes=0, max_bytes=1 << 20)


def _create(name: str, diskless: bool) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "diskless.enable", "value": str(diskless).lower()}],
            }
        ],
        "timeout": 10_000,
        "validate_only": False,
    }


class _Cluster:
    """One controller and one broker in this event loop, their data in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.service: Any = None
        self.broker: Any = None

    async def __aenter__(self) -> _Cluster:
        from broker.config import BrokerConfig
        from broker.metadata.controller_catalog import ControllerCatalog
        from broker.node import Broker
        from controller.service import ControllerService, ControllerSettings
        from storage.backends import coordinator_and_catalog, object_store

        self.service = ControllerService(
            ControllerSettings(
                node_id=1,
                voters={1: ("127.0.0.1", 0)},
                host="127.0.0.1",
                http_port=0,
                data_dir=self.root / "controller",
                secret=SECRET,
                session_timeout_ms=5000,
                raft_options={"fsync": False},
            )
        )
        await self.service.start()
        await self.service.wait_active()
        config = BrokerConfig(
            node_id=1,
            port=0,
            rack="az-1",
            data_dir=str(self.root / "broker"),
            controller_quorum_bootstrap_servers=f"127.0.0.1:{self.service.http_port}",
            controller_secret=SECRET,
            broker_heartbeat_interval_ms=500,
            broker_session_timeout_ms=5000,
        )
        controllers = ControllerCatalog.from_config(config)
        coordinator, catalog = coordinator_and_catalog(config, controllers)
        self.broker = Broker(config, object_store(config), coordinator, catalog)
        await self.broker.start()
        deadline = time.monotonic() + 20
        while not self.broker.endpoints():
            if time.monotonic() > deadline:
                raise RuntimeError("the broker did not register with the controller")
            await asyncio.sleep(0.05)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.service is not None:
            await self.service.stop()


async def _until(check: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"not in time: {what}")
        await asyncio.sleep(0.1)


async def trace_paths(root: Path, warmups: int = 3) -> list[RequestPath]:
    """The four paths: Produce and Fetch on a diskless and on a classic topic."""
    from bench.kafka_wire import WireClient

    paths: list[RequestPath] = []
    async with _Cluster(root) as cluster:
        client = WireClient("127.0.0.1", cluster.broker.port, "request-path")
        port = client.local_port  # the connection the broker sees us on

        async def call(key: int, version: int, body: dict[str, Any]) -> Any:
            return await asyncio.to_thread(client.call, key, version, body)

        async def traced(key: int, version: int, body: dict[str, Any]) -> tuple[Any, _Tracer]:
            tracer = _Tracer(port)
            sys.setprofile(tracer)
            try:
                answer = await call(key, version, body)
            finally:
                sys.setprofile(None)
            return answer, tracer

        try:
            for kind in ("diskless", "classic"):
                topic = f"path-{kind}"
                created = await call(CREATE_TOPICS_KEY, 5, _create(topic, kind == "diskless"))
                error = created.topics[0].error_code
                if int(error):
                    raise RuntimeError(f"CreateTopics {topic}: {error!r}")

                async def produce_ok(topic: str = topic) -> Any:
                    answer = await call(PRODUCE_KEY, PRODUCE_VERSION, _produce(topic))
                    part = answer.responses[0].partition_responses[0]
                    return part if int(part.error_code) == 0 else None

                # The first produce waits for the partition's leadership to reach the broker.
                await _until(produce_ok, f"a produce to {topic}")
                for _ in range(warmups):
                    await produce_ok()
                    await call(FETCH_KEY, FETCH_VERSION, _fetch(topic, 0))
                answer, tracer = await traced(PRODUCE_KEY, PRODUCE_VERSION, _produce(topic))
                part = answer.responses[0].partition_responses[0]
                if int(part.error_code):
                    raise RuntimeError(f"traced Produce to {topic}: {part.error_code!r}")
                paths.append(
                    RequestPath("Produce", kind, tracer.files, tracer.calls, tracer.functions)
                )
                answer, tracer = await traced(FETCH_KEY, FETCH_VERSION, _fetch(topic, 0))
                fetched = answer.responses[0].partitions[0]
                if int(fetched.error_code) or not fetched.records:
                    raise RuntimeError(f"traced Fetch of {topic}: {fetched.error_code!r}")
                paths.append(
                    RequestPath("Fetch", kind, tracer.files, tracer.calls, tracer.functions)
                )
        finally:
            client.close()
    return paths


def run(root: Path | None = None) -> list[RequestPath]:
    if root is not None:
        return asyncio.run(trace_paths(root))
    with tempfile.TemporaryDirectory(prefix="request-path-") as tmp:
        return asyncio.run(trace_paths(Path(tmp)))


def _summary(paths: list[RequestPath]) -> Iterator[str]:
    for p in paths:
        stages = p.stages
        yield (
            f"{p.request:7s} {p.topic_kind:8s} distinct={p.distinct:3d} "
            f"entries={len(p.files):3d} reentered={len(p.reentered)}"
            f"   by package: distinct={len(set(stages))} entries={len(stages)} "
            f"reentered={len(_reentered(stages))}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the paths as JSON")
    parser.add_argument(
        "--functions", action="store_true", help="name the functions called in each entry"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    paths = run()
    if args.json:
        print(json.dumps([p.as_dict() for p in paths], indent=2))
        return 0
    for p in paths:
        print(p.render(args.functions))
        print()
    print("\n".join(_summary(paths)))
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "request-path"
    sys.exit(main())
