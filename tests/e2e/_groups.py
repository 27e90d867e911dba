"""Helpers of the consumer-group e2e tests: member processes and what they report.

Each :class:`MemberProcess` runs ``_group_member.py`` (one stock-client consumer that
subscribes) and collects its JSON event lines on a thread; tests wait on those events
with a deadline, so a broker bug fails with what was seen instead of hanging.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ._kafka import Msg, confluent_produce

MEMBER_SCRIPT = Path(__file__).with_name("_group_member.py")
# Broker options of the group tests: short minimum session timeout, so members can use
# short ones and failures are noticed fast.
GROUP_BROKER_OPTIONS = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}
SESSION_MS = 3000
WAIT_S = 30.0


JAVA_PROGRAM = Path(__file__).parent / "java" / "ClientCheck.java"


def _java_member(bootstrap: str, topic: str, group: str, protocol: str, commit: bool) -> list[str]:
    """The Java client (kafka-clients 4.x) as a member: ClientCheck.java's ``member`` mode
    reports the same events as _group_member.py (the Java client's own session and
    heartbeat settings: with group.protocol=consumer they are the broker's)."""
    from sluice.launch.kafka import java_command

    return java_command(
        str(JAVA_PROGRAM), bootstrap, topic, "member", group, protocol,
        "commit" if commit else "no-commit",
    )  # fmt: skip


class MemberProcess:
    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *,
        session_ms: int = SESSION_MS,
        instance_id: str = "",
        strategy: str = "",
        commit: bool = False,
        rebalance_ms: int = 10_000,
        protocol: str = "classic",
    ) -> None:
        self.client = client
        self.name = name
        cmd = (
            _java_member(bootstrap, topic, group, protocol, commit)
            if client == "java"
            else self._python_member(
                client, bootstrap, group, topic, name, session_ms, instance_id, strategy,
                commit, rebalance_ms, protocol,
            )
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._lock = threading.RLock()  # predicates of wait() read events under it
        self._changed = threading.Condition(self._lock)
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def __repr__(self) -> str:
        return f"<{self.client} member {self.name}>"

    @staticmethod
    def _python_member(
        client: str, bootstrap: str, group: str, topic: str, name: str, session_ms: int,
        instance_id: str, strategy: str, commit: bool, rebalance_ms: int, protocol: str,
    ) -> list[str]:  # fmt: skip
        cmd = [
            sys.executable,
            str(MEMBER_SCRIPT),
            "--client", client,
            "--bootstrap", bootstrap,
            "--group", group,
            "--topic", topic,
            "--name", name,
            "--session-ms", str(session_ms),
            "--heartbeat-ms", str(max(session_ms // 6, 100)),
            "--rebalance-ms", str(rebalance_ms),
        ]  # fmt: skip
        if instance_id:
            cmd += ["--instance-id", instance_id]
        if strategy:
            cmd += ["--strategy", strategy]
        if commit:
            cmd.append("--commit")
        if protocol != "classic":
            cmd += ["--protocol", protocol]
        return cmd

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "garbage", "line": line}
            event["t"] = time.monotonic()
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.stderr.append(line)
                del self.stderr[:-50]

    # ---------------------------------------------------------------- views

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["event"] == kind]

    @property
    def assignment(self) -> list[int]:
        changes = self.of("assignment")
        return changes[-1]["partitions"] if changes else []

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["partition"], e["offset"], e["value"]) for e in self.of("record")]

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not predicate()):
                    raise AssertionError(
                        f"{self}: {what} did not happen within {timeout:.0f}s; "
                        f"exit code {self.proc.poll()}; last events {self.events[-5:]}; "
                        f"stderr {''.join(self.stderr[-10:])}"
                    )
                self._changed.wait(min(left, 0.2))

    # ---------------------------------------------------------------- lifecycle

    def stop(self, timeout: float = 20.0) -> None:
        """Ask for a clean close (LeaveGroup for a dynamic member) and wait for the exit."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout)
        assert self.of("closed"), f"{self} did not close cleanly: {''.join(self.stderr[-10:])}"

    def kill(self) -> None:
        """A crash: no LeaveGroup, no commit; only the session timeout tells the broker."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()


class Members:
    """The member processes of one test; all are killed at teardown."""

    def __init__(self) -> None:
        self.started: list[MemberProcess] = []

    def start(self, *args: Any, **kwargs: Any) -> MemberProcess:
        member = MemberProcess(*args, **kwargs)
        self.started.append(member)
        return member

    def cleanup(self) -> None:
        for member in self.started:
            member.cleanup()


def partitioned(members: Iterable[MemberProcess], partitions: int) -> bool:
    """Every partition owned by exactly one of ``members``, each owning at least one."""
    owned = [m.assignment for m in members]
    flat = [p for parts in owned for p in parts]
    return all(owned) and sorted(flat) == list(range(partitions))


def describe_assignments(members: Sequence[MemberProcess]) -> str:
    return ", ".join(f"{m}: {m.assignment}" for m in members)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a consumer of the group reads them (-1: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=20
        )
        return {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in found}
    finally:
        consumer.close()


def produce_round_robin(
    bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "p"
) -> None:
    """``per_partition`` records to every partition, valued "<tag><partition>-<i>"."""
    for p in range(partitions):
        msgs = [Msg(None, f"{tag}{p}-{i}".encode()) for i in range(per_partition)]
        confluent_produce(bootstrap, topic, msgs, partition=p)


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int]]:
    """(partition, offset) of ``count`` records read by a confluent group member that
    commits each; then it closes."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                # Transient errors (a broker going away) are retried by librdkafka.
                assert not msg.error().fatal(), msg.error()
                continue
            got.append((msg.partition(), msg.offset()))
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


def assert_resumes(earlier: list[tuple[int, int]], later: list[tuple[int, int]]) -> None:
    """``later`` starts on each partition exactly where ``earlier`` stopped."""
    for p in {p for p, _ in later}:
        done = [o for q, o in earlier if q == p]
        first = min(o for q, o in later if q == p)
        assert first == (max(done) + 1 if done else 0), (p, done, first)
