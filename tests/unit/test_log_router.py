"""One router for every API (broker/logs/router.py, issue 26): LogRouter.route gives each
call the log the routing rules name, through both migrations, and no request handler asks
which engine serves a partition itself."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.logs.partition_log import Answered, EpochAnswer, OffsetAnswer
from broker.logs.router import LogRouter, Purpose
from storage.classic.epoch_cache import EpochCache
from tests.unit.test_migration_routing import Manager, migrate, replica, seal, setup

DISKLESS: Any = SimpleNamespace(name="diskless")
CLASSIC: Any = SimpleNamespace(name="classic")


def router(broker: Any, manager: Manager) -> LogRouter:
    broker.classic = manager
    return LogRouter(broker, DISKLESS, CLASSIC)


def test_every_purpose_follows_the_rules_through_both_migrations() -> None:
    c, broker, tid = setup()
    first = replica(0)
    first.list_offset = lambda ts, rc: (0, 5, ts)  # a record at offset 5 for any time
    logs = router(broker, Manager(c.image, {(tid, 0): first}))

    def kinds(purpose: Purpose, offset: int = -1, replica_id: int = -1) -> Any:
        log = logs.route(tid, 0, purpose, offset, replica_id=replica_id)
        return log.name if not isinstance(log, Answered) else log

    for purpose in (Purpose.APPEND, Purpose.MARKER, Purpose.DELETE, Purpose.LIST_OFFSETS):
        assert kinds(purpose) == "classic"
    assert kinds(Purpose.READ, 10**9) == "classic"
    migrate(c, "true")
    seal(c, 0, 100, old_bytes=4096)
    # Sealed for diskless: appends and their markers go to the diskless log, reads by offset.
    assert kinds(Purpose.APPEND) == kinds(Purpose.MARKER) == "diskless"
    assert kinds(Purpose.READ, 99) == "classic" and kinds(Purpose.READ, 100) == "diskless"
    assert kinds(Purpose.READ, 100, replica_id=2) == "classic"  # a follower
    assert kinds(Purpose.LIST_OFFSETS, -1) == "diskless"
    earliest = kinds(Purpose.LIST_OFFSETS, -2)
    assert isinstance(earliest, Answered) and earliest.offsets == OffsetAnswer(0, 0, -1, 0)
    by_time = kinds(Purpose.LIST_OFFSETS, 1_000)
    assert isinstance(by_time, Answered) and by_time.offsets == OffsetAnswer(0, 5, 1_000, 0)
    assert kinds(Purpose.EPOCHS, 0) == "diskless" and kinds(Purpose.EPOCHS, 0, 2) == "classic"
    seal(c, 1, 7)
    migrate(c, "false")
    # Being sealed towards classic: no broker appends to the diskless log.
    refused = kinds(Purpose.APPEND)
    assert isinstance(refused, Answered)
    assert refused.error == int(ErrorCode.not_leader_or_follower)
    assert kinds(Purpose.MARKER) == "diskless"
    seal(c, 0, 300, old_start=100)
    assert kinds(Purpose.APPEND) == kinds(Purpose.MARKER) == "classic"
    reads = {o: kinds(Purpose.READ, o) for o in (0, 99, 100, 299, 300)}
    assert reads == {0: "classic", 99: "classic", 100: "diskless", 299: "diskless", 300: "classic"}
    # A consumer's OffsetForLeaderEpoch for an epoch of the diskless part: the classic
    # leader's log end (its high watermark may trail it).
    first.high_watermark, first.log.log_end_offset = 420, 450
    first.log.epochs = EpochCache(None)
    epochs = kinds(Purpose.EPOCHS, 0)
    assert isinstance(epochs, Answered) and epochs.epochs == EpochAnswer(0, 0, 450)


def test_a_broker_without_classic_logs_routes_everything_to_the_diskless_log() -> None:
    logs = LogRouter(SimpleNamespace(classic=None), DISKLESS, CLASSIC)  # type: ignore[arg-type]
    for purpose in Purpose:
        assert logs.route(SimpleNamespace(), 0, purpose, 0) is DISKLESS  # type: ignore[arg-type]
    assert logs.log_start(SimpleNamespace(), 0, 42) == 42  # type: ignore[arg-type]


RULES = {
    "appends_classic",
    "refuses_diskless_append",
    "reads_classic",
    "list_offset_route",
    "whole_log_start",
    "epochs_route",
    "sealed_boundary",
    "has_diskless_part",
    "classic_end_below",
    "coordinator_retains",
    "markers_on_classic_leader",
}


def test_no_request_handler_asks_which_engine_serves_a_partition() -> None:
    """Handlers call the log the router gives them: none imports a routing rule or asks
    the replica manager whether a topic is classic."""
    root = Path(__file__).resolve().parents[2]
    # The handlers are the modules the API table imports (broker/server/api_table.py).
    table = ast.parse((root / "broker/server/api_table.py").read_text())
    handlers = sorted(
        root / node.module.replace(".", "/") / f"{alias.name}.py"
        for node in ast.walk(table)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("broker.")
        for alias in node.names
        if (root / node.module.replace(".", "/") / f"{alias.name}.py").exists()
    )
    assert len(handlers) > 20, handlers
    asking: list[str] = []
    for path in handlers:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("logs.router"):
                asking += [f"{path.name}: {a.name}" for a in node.names if a.name in RULES]
            if isinstance(node, ast.Attribute) and node.attr == "is_classic":
                asking.append(f"{path.name}: is_classic")
    assert asking == []


def test_no_module_outside_the_logs_decides_which_engine_serves_a_partition() -> None:
    """The router is the one place (broker/logs/): the Broker and every component it wires
    (group lag, retention, transaction markers, the fetch path's preferred replica) ask
    the LogRouter it built, never a routing rule, the replica manager's ``is_classic`` or
    the topic's own ``diskless`` flag."""
    root = Path(__file__).resolve().parents[2]
    asking: list[str] = []
    for path in sorted((root / "broker").rglob("*.py")):
        if (root / "broker/logs") in path.parents:
            continue
        tree = ast.parse(path.read_text())
        name = str(path.relative_to(root))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("logs.router"):
                asking += [f"{name}: {a.name}" for a in node.names if a.name in RULES]
            if isinstance(node, ast.Attribute) and node.attr == "is_classic":
                asking.append(f"{name}: is_classic")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "diskless"
                and isinstance(node.value, ast.Name)
                and node.value.id.startswith("topic")
            ):
                asking.append(f"{name}: {node.value.id}.diskless")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and any(
                    isinstance(n, ast.Name) and ("Classic" in n.id or "Diskless" in n.id)
                    for n in ast.walk(node.args[1])
                )
            ):
                asking.append(f"{name}: isinstance {ast.unparse(node.args[1])}")
    assert asking == []


class LeadingManager(Manager):
    """The replica manager, leading the partitions it hosts as leader."""

    def leader_partition(self, topic_id: Any, partition: int) -> tuple[Any, int]:
        p = self.get(topic_id, partition)
        if p is None or p.role != "leader":
            return None, int(ErrorCode.not_leader_or_follower)
        return p, 0


def test_the_lag_of_a_partition_is_reported_where_its_latest_offset_is_read() -> None:
    """``latest_led_here`` (who exports a group's lag, broker/groups/lag.py) follows the
    log ListOffsets LATEST is routed to: the classic leader while the high watermark is
    the classic log's, any broker (None) once the partition's end is diskless, the
    classic leader again once it migrated back."""
    c, broker, tid = setup()
    led, followed = replica(0), replica(0)
    followed.role = "follower"
    logs = router(broker, LeadingManager(c.image, {(tid, 0): led, (tid, 1): followed}))
    assert logs.latest_led_here(tid, 0) is True
    assert logs.latest_led_here(tid, 1) is False  # its leader (another broker) reports it
    migrate(c, "true")
    seal(c, 0, 100)
    assert logs.latest_led_here(tid, 0) is None  # sealed: the end is the diskless log's
    assert logs.latest_led_here(tid, 1) is False  # not sealed yet: still classic
    seal(c, 1, 7)
    migrate(c, "false")
    seal(c, 0, 300, old_start=100)
    assert logs.latest_led_here(tid, 0) is True
    no_classic = LogRouter(SimpleNamespace(classic=None), DISKLESS, CLASSIC)  # type: ignore[arg-type]
    assert no_classic.latest_led_here(tid, 0) is None


def test_every_engine_implements_the_whole_partition_log() -> None:
    """No type checker runs in CI: the engines' methods are checked against the Protocol."""
    import inspect

    from broker.logs.classic.classic_log import ClassicLog
    from broker.logs.diskless.diskless_log import DisklessLog
    from broker.logs.partition_log import PartitionLog

    methods = [n for n, v in vars(PartitionLog).items() if callable(v) and n[0] != "_"]
    assert "append" in methods and "write_marker" in methods
    for engine in (DisklessLog, ClassicLog, Answered):
        for name in methods:
            theirs = inspect.signature(getattr(engine, name)).parameters
            assert list(theirs) == list(inspect.signature(getattr(PartitionLog, name)).parameters)
