"""The nemesis: a seeded schedule of faults, injected one at a time, each healed before the next.

A schedule is a list of :class:`Fault` drawn from the seed alone (kind, hold time, which
partition's leader or follower, the pause after); targets named by role (the leader of
partition N, the active controller) are resolved from metadata when the fault starts.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cluster import NemesisCluster
from .netns import PG_IP

PROCESS_FAULTS = (
    "kill-leader",
    "stop-leader",
    "kill-follower",
    "stop-follower",
    "kill-controller",
    "stop-controller",
    "kill-postgres",
    "stop-postgres",
    "kill-s3",
    "stop-s3",
    # Both followers paused past their fetch wait (a produce then waits on the high
    # watermark and the client's request times out and is retried), then the leader is
    # killed and the followers resumed: the new leader never had what was waiting.
    "stop-followers-kill-leader",
)
PROXY_FAULTS = (
    "s3-latency",
    "s3-503",
    "s3-500",
    "s3-reset",
    "pg-latency",
    "pg-reset",
)
# Network partitions (--netns: each broker and controller in its own network namespace).
NET_FAULTS = (
    "cut-leader-from-controllers",  # both ways; clients and followers still reach it
    "cut-follower-from-leader",  # both ways
    "cut-leader-to-follower-oneway",  # the leader's packets to one follower are dropped
    "cut-controller-minority",  # the active controller from the other two, both ways
    "cut-leader-from-postgres",  # the leader's packets to PostgreSQL (its proxy) dropped
)
ALL_FAULTS = PROCESS_FAULTS + PROXY_FAULTS
# Not a fault: the migrating topic's diskless.enable flipped (classic -> diskless -> classic ...)
# while it is produced to and the other faults go on.
MIGRATION = ("migrate",)
# Named schedules: each fault kind the schedule draws from.
SCHEDULES: dict[str, tuple[str, ...]] = {
    "all": ALL_FAULTS + MIGRATION,
    "process": PROCESS_FAULTS,
    "proxy": PROXY_FAULTS,
    # Reproduces issue 24 item 1 (acks=all record acknowledged by a retry above the high
    # watermark, then lost) on every fault.
    "retry-above-hw": ("stop-followers-kill-leader",),
    # CI: the fault that reproduces issue 24 item 1 first, then a seeded mix of all.
    "ci": ALL_FAULTS,
    "net": NET_FAULTS,
    "all-net": ALL_FAULTS + NET_FAULTS + MIGRATION,
    "migration": PROCESS_FAULTS + MIGRATION * 4,
    # The batch coordinator's (PostgreSQL's) outages alone: diskless commits whose outcome
    # is unknown, idempotent retries across them.
    "pg": ("kill-postgres", "stop-postgres", "pg-latency", "pg-reset"),
    # The object store's outages alone (diskless produce, transaction markers, tiering).
    "s3": ("kill-s3", "stop-s3", "s3-503", "s3-reset"),
}
FIRST: dict[str, tuple[str, ...]] = {"ci": ("stop-followers-kill-leader",)}


@dataclass(frozen=True)
class Fault:
    kind: str
    hold: float  # seconds the fault lasts
    partition: int  # which partition's leader/follower (modulo the partition count)
    pick: int  # which follower, when there are several
    pause: float  # seconds of calm after the cluster is healthy again


def schedule(seed: int, seconds: float, name: str, each: int = 0) -> list[Fault]:
    """Faults of schedule ``name``, more than fit in ``seconds`` (a fault with its recovery
    takes 7 to 15 s): the nemesis stops at its deadline. With ``each``: that many rounds of
    every kind of the schedule once, in a seeded order per round (the long run's "every fault
    kind at least N times"); ``seconds`` is then only the deadline."""
    rng = random.Random(seed)
    kinds = SCHEDULES[name]
    first = list(FIRST.get(name, ()))
    if each:
        for _ in range(each):
            round_ = list(dict.fromkeys(kinds))
            rng.shuffle(round_)
            first += round_
    out: list[Fault] = []
    budget = seconds
    while (budget > 0 and not each) or first:
        kind = first.pop(0) if first else rng.choice(kinds)
        hold = round(rng.uniform(2.0, 6.0), 1)
        fault = Fault(
            kind, hold, rng.randrange(1000), rng.randrange(2), round(rng.uniform(1, 4), 1)
        )
        out.append(fault)
        budget -= fault.hold + fault.pause + 2
    return out


@dataclass
class Event:
    kind: str
    target: str
    started: float  # time.time(), as the clients' records
    healed: float = 0.0
    recovered: float = 0.0  # cluster healthy again (full ISRs)
    partition: tuple[str, int] | None = None


@dataclass
class Nemesis:
    cluster: NemesisCluster
    topic: str  # the classic topic whose leaders and followers are targets
    partitions: int
    healthy_topics: list[str]
    # The topics "migrate" flips between classic and diskless: the first to diskless and
    # back, then the next (a topic back to classic cannot migrate again).
    migrating: list[str] = field(default_factory=list)
    # Called with the topic as a migration starts: a consumer of a new group joins then
    # (issue 31).
    on_migrate: Callable[[str], None] | None = None
    events: list[Event] = field(default_factory=list)
    migrated: int = 0  # migrations asked so far
    log: list[str] = field(default_factory=list)

    def _say(self, what: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {what}"
        self.log.append(line)
        print("nemesis:", line, flush=True)

    def _roles(self, partition: int) -> tuple[int, list[int]]:
        """(leader, followers) of the partition; waits for it to have a leader."""
        deadline = time.monotonic() + 30
        while True:
            md = self.cluster.admin().list_topics(self.topic, timeout=10).topics[self.topic]
            p = md.partitions[partition]
            if p.leader >= 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if p.leader < 0:
            raise RuntimeError(f"{self.topic}-{partition} has no leader")
        return p.leader, sorted(r for r in p.replicas if r != p.leader)

    def run(self, faults: list[Fault], deadline: float, tick: Any = None) -> None:
        """Inject ``faults`` in turn until ``deadline`` (time.monotonic()); ``tick()`` is
        called between faults (the workload restarts crashed clients)."""
        for fault in faults:
            if time.monotonic() + fault.hold > deadline:
                break
            try:
                self.inject(fault)
            except RuntimeError as exc:  # no leader to aim at: skip this fault
                self._say(f"{fault.kind} skipped: {exc}")
                if self.events and not self.events[-1].healed:
                    self.events.pop()
                self.cluster.heal_all()
            try:
                self.cluster.wait_healthy(self.healthy_topics, timeout=90)
                self.events[-1].recovered = time.time()
            except TimeoutError as exc:
                self._say(f"not healthy after {fault.kind}: {exc}")
            if tick is not None:
                tick()
            time.sleep(fault.pause)

    def inject(self, fault: Fault) -> None:
        c = self.cluster
        kind = fault.kind
        partition = fault.partition % self.partitions
        target = ""
        if kind.startswith("cut-") or kind == "migrate":
            target = ""  # named below
        elif kind.endswith("-leader") or kind.endswith("-follower"):
            leader, followers = self._roles(partition)
            if kind.endswith("-leader"):
                target = f"broker-{leader}"
            else:
                target = f"broker-{followers[fault.pick % len(followers)]}"
        elif kind.endswith("-controller"):
            target = c.active_controller() or "controller-1"
        elif kind in ("kill-postgres", "stop-postgres"):
            target = "postgres"
        elif kind in ("kill-s3", "stop-s3"):
            target = "s3"
        event = Event(kind, target, time.time(), partition=(self.topic, partition))
        self.events.append(event)

        if kind == "stop-followers-kill-leader":
            leader, followers = self._roles(partition)
            event.target = f"broker-{leader} (followers {followers})"
            self._say(f"{kind} {self.topic}-{partition}: stop {followers}, kill {leader}")
            for f in followers:
                c.signal(f"broker-{f}", signal.SIGSTOP)
            # Past the followers' fetch wait and the clients' request timeout (1.5 s: the leader
            # answers REQUEST_TIMED_OUT and the client retries), but short of the brokers'
            # session and replica.lag.time.max.ms: the followers stay in the ISR (a fenced
            # broker leaves every ISR) and one of them becomes the leader.
            time.sleep(3.0)
            c.signal(f"broker-{leader}", signal.SIGKILL)
            for f in followers:
                c.signal(f"broker-{f}", signal.SIGCONT)
            time.sleep(fault.hold)
            c.restart(f"broker-{leader}")
        elif kind == "migrate":
            if not self.migrating:
                raise RuntimeError("no migrating topic")
            # Sluice refuses classic -> diskless again for a topic that came back to classic
            # (INVALID_CONFIG): with too few topics the step is then skipped.
            topic = self.migrating[min(self.migrated // 2, len(self.migrating) - 1)]
            value = str(self.migrated % 2 == 0).lower()
            event.target = f"{topic} diskless.enable={value}"
            self._say(f"{kind} {event.target}, then {fault.hold}s")
            self._alter(topic, "diskless.enable", value)
            self.migrated += 1
            if self.on_migrate is not None:
                self.on_migrate(topic)
            time.sleep(fault.hold)
        elif kind.startswith("cut-"):
            event.target = self._cut(kind, partition, fault.pick)
            self._say(f"{kind} {event.target} for {fault.hold}s")
            time.sleep(fault.hold)
            assert c.net is not None
            c.net.heal()
        elif kind.startswith("kill-"):
            self._say(f"{kind} {target} for {fault.hold}s")
            c.signal(target, signal.SIGKILL)
            time.sleep(fault.hold)
            c.restart(target)
        elif kind.startswith("stop-"):
            self._say(f"{kind} {target} for {fault.hold}s")
            c.signal(target, signal.SIGSTOP)
            time.sleep(fault.hold)
            c.signal(target, signal.SIGCONT)
        else:
            proxy = c.s3_proxy if kind.startswith("s3-") else c.pg_proxy
            assert proxy is not None
            effect: dict[str, Any]
            effect = {
                "s3-latency": {"latency": 0.3},
                "s3-503": {"http_status": 503},
                "s3-500": {"http_status": 500},
                "s3-reset": {"reset": True},
                "pg-latency": {"latency": 0.1},
                "pg-reset": {"reset": True},
            }[kind]
            event.target = proxy.name
            self._say(f"{kind} for {fault.hold}s")
            proxy.set(**effect)
            time.sleep(fault.hold)
            proxy.clear()
        event.healed = time.time()

    def _alter(self, topic: str, key: str, value: str) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        admin = self.cluster.admin()
        try:
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
        except Exception as exc:
            raise RuntimeError(f"{key}={value} on {topic}: {exc}") from exc

    def _cut(self, kind: str, partition: int, pick: int) -> str:
        net = self.cluster.net
        if net is None:
            raise RuntimeError(f"{kind} needs --netns")
        leader, followers = self._roles(partition)
        lead, follower = f"broker-{leader}", f"broker-{followers[pick % len(followers)]}"
        controllers = [f"controller-{i}" for i in (1, 2, 3)]
        if kind == "cut-leader-from-controllers":
            for ctl in controllers:
                net.cut(lead, ctl)
            return f"{lead} | controllers"
        if kind == "cut-follower-from-leader":
            net.cut(follower, lead)
            return f"{follower} | {lead}"
        if kind == "cut-leader-to-follower-oneway":
            net.cut(lead, follower, both=False)
            return f"{lead} -> {follower}"
        if kind == "cut-controller-minority":
            active = self.cluster.active_controller() or "controller-1"
            for ctl in controllers:
                if ctl != active:
                    net.cut(active, ctl)
            return f"{active} | other controllers"
        if kind == "cut-leader-from-postgres":
            net.cut(lead, PG_IP, both=False)
            return f"{lead} -> postgres"
        raise ValueError(kind)


def unavailability(
    events: list[Event], acks: list[Any], run_end: float, settle: float = 20.0
) -> dict[str, dict[str, Any]]:
    """Per fault kind and topic kind: the longest time a partition went without an
    acknowledged acks=all record, from the fault's start until it was healed plus ``settle``
    seconds (or the next fault); one figure per fault (its worst partition), then the median
    and max over the faults of a kind."""
    by_tp: dict[tuple[str, int], list[float]] = {}
    kind_of: dict[str, str] = {}
    for a in acks:
        by_tp.setdefault((a.topic, a.partition), []).append(a.at)
        kind_of[a.topic] = a.value.split("/")[1].rsplit("-", 1)[0]
    for times in by_tp.values():
        times.sort()
    per: dict[tuple[str, str], list[float]] = {}
    for i, e in enumerate(events):
        end = min(e.healed + settle, run_end)
        if i + 1 < len(events):
            end = min(end, events[i + 1].started)
        worst: dict[str, float] = {}
        for (topic, _p), times in by_tp.items():
            gap = _longest_gap(times, e.started, end)
            worst[kind_of[topic]] = max(worst.get(kind_of[topic], 0.0), gap)
        for topic_kind, gap in worst.items():
            per.setdefault((e.kind, topic_kind), []).append(gap)
    out: dict[str, dict[str, Any]] = {}
    recoveries: dict[str, list[float]] = {}
    for e in events:
        if e.recovered:
            recoveries.setdefault(e.kind, []).append(e.recovered - e.healed)
    for fault, times in sorted(recoveries.items()):
        # From the heal to every partition's full ISR again.
        times.sort()
        out.setdefault(fault, {})["isr_recovery"] = {
            "n": len(times),
            "median_s": round(times[len(times) // 2], 2),
            "max_s": round(times[-1], 2),
        }
    for (fault, topic_kind), gaps in sorted(per.items()):
        gaps.sort()
        out.setdefault(fault, {})[topic_kind] = {
            "n": len(gaps),
            "median_s": round(gaps[len(gaps) // 2], 2),
            "max_s": round(gaps[-1], 2),
        }
    return out


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """Longest stretch without an ack that overlaps [start, end]: from the fault's start (or
    an ack) to the next ack, the first ack after ``end`` included."""
    longest, last = 0.0, start
    for t in times:
        if t <= start:
            continue
        longest = max(longest, t - last)
        last = t
        if t > end:
            break
    else:
        longest = max(longest, end - last)
    return longest
