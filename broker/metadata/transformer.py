"""The metadata transformer: which broker(s) a client is told serve a diskless partition.

Pure logic (no broker state) so every case of the routing rules is unit-tested:

* alive replicas in the client's AZ -> those (AZ-local routing);
* no alive replica there, but alive brokers there -> one of them by hash (``local_fallback``,
  on by default; see :func:`route`);
* else alive replicas exist -> all of them (cross-AZ fallback);
* every replica offline -> murmur2 hash choice among alive brokers of the client's AZ,
  else among all alive brokers.

Clients without an AZ get the recorded placement with offline brokers routed around.
Whenever one broker must be picked from several, it is seed 001's
``candidates[abs(murmur2("<topicId>-<partition>")) % len(candidates)]`` over candidates
sorted by node id, with Java's ``Math.abs`` and ``%`` (``hash_index``), so every broker
answers every request alike and each partition keeps one warm cache per AZ.
``diskless.transformer.hash=to_positive`` uses Kafka's ``Utils.toPositive`` instead of
``abs`` (what Inkless' transformer code does): a third of the partitions land elsewhere.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from uuid import UUID

from protocol.murmur2 import java_abs, java_rem, murmur2, to_positive

log = logging.getLogger("sluice.transformer")

# Route.reason values.
LOCAL = "local"  # an alive replica in the client's AZ
AZ_HASH = "az_hash"  # no alive replica in the AZ: hashed to an alive broker there
CROSS_AZ = "cross_az"  # no alive broker in the AZ: all alive replicas
HASH = "hash"  # every replica offline: hashed over alive brokers
RECORDED = "recorded"  # unaware client: the controller's placement
NONE = "none"  # no alive broker at all


@dataclass(frozen=True, slots=True)
class Route:
    leader: int  # -1: nothing alive to route to
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]  # offline replicas listed in ``replicas``
    reason: str
    routed_around: tuple[int, ...] = ()  # offline replicas the answer avoided
    all_offline: bool = False  # every replica offline: hashed to an alive broker

    @property
    def single(self) -> bool:
        return len(self.replicas) == 1

    @property
    def hash_fallback(self) -> bool:
        """Answered by a hash over brokers that are not (alive) replicas: seed 000's
        "hash fallback", counted by ``kafka_server_diskless_transformer_fallback_total``."""
        return self.reason in (AZ_HASH, HASH)


def kafka_uuid(topic_id: UUID) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


@lru_cache(maxsize=65536)
def partition_hash(topic_id: UUID, partition: int) -> int:
    """murmur2("<topicId>-<partition>") as Java's signed int: cached, Metadata asks per
    partition."""
    return murmur2(f"{kafka_uuid(topic_id)}-{partition}".encode())


# How a hash becomes an index (``diskless.transformer.hash``): seed 001's formula, or
# Kafka's toPositive as Inkless' code has it. Set once at broker start (``set_hash_mode``):
# every broker of a cluster must use the same, or clients get told different brokers.
HASH_ABS = "abs"
HASH_TO_POSITIVE = "to_positive"
HASH_MODES = (HASH_ABS, HASH_TO_POSITIVE)
_hash_mode = HASH_ABS


def set_hash_mode(mode: str) -> None:
    global _hash_mode
    if mode not in HASH_MODES:
        raise ValueError(f"diskless.transformer.hash must be one of {HASH_MODES}, not {mode!r}")
    _hash_mode = mode


def hash_index(h: int, n: int, mode: str | None = None) -> int:
    """The index among ``n`` candidates for the signed 32-bit hash ``h``.

    ``abs``: Java's ``Math.abs(h) % n``. For ``Integer.MIN_VALUE`` that is negative
    (``Math.abs`` overflows and Java's ``%`` keeps the dividend's sign): Java would then
    index its list with a negative number and throw. Here that one value is counted from
    the end (``Math.floorMod``) rather than failing the request."""
    if (mode or _hash_mode) == HASH_TO_POSITIVE:
        return to_positive(h) % n
    r = java_rem(java_abs(h), n)
    return r + n if r < 0 else r


def pick(candidates: Sequence[int], topic_id: UUID, partition: int) -> int:
    ordered = sorted(candidates)
    return ordered[hash_index(partition_hash(topic_id, partition), len(ordered))]


def route(
    topic_id: UUID,
    partition: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    alive: Mapping[int, str | None],
    client_az: str | None,
    local_fallback: bool = True,
) -> Route:
    """Route one diskless partition. ``alive`` maps each alive broker to its rack.

    ``local_fallback``: when the client's AZ has alive brokers but none is an alive replica
    (its replica's broker died, or a legacy RF=1 topic lives elsewhere), route to one of
    them by hash rather than across AZs: any broker serves any diskless partition, so this
    keeps the bytes in the AZ. False sends such clients to all alive replicas (cross-AZ)."""
    alive_replicas = [r for r in replicas if r in alive]
    offline = tuple(r for r in replicas if r not in alive)
    if client_az is None:
        return _unaware(topic_id, partition, replicas, isr, leader, alive, alive_replicas, offline)
    if alive_replicas:
        local = [r for r in alive_replicas if alive[r] == client_az]
        if local:
            chosen = local[0] if len(local) == 1 else pick(local, topic_id, partition)
            return Route(chosen, (chosen,), (chosen,), (), LOCAL)
        az_brokers = [b for b, rack in alive.items() if rack == client_az]
        if local_fallback and az_brokers:
            chosen = pick(az_brokers, topic_id, partition)
            return Route(chosen, (chosen,), (chosen,), (), AZ_HASH, routed_around=offline)
        # Cross-AZ: the alive replicas, led by the recorded leader while it is alive.
        lead = leader if leader in alive_replicas else pick(alive_replicas, topic_id, partition)
        in_sync = tuple(r for r in alive_replicas if r in isr or r == lead)
        return Route(lead, tuple(alive_replicas), in_sync, (), CROSS_AZ, routed_around=offline)
    return _hash_any(topic_id, partition, alive, client_az, offline)


def _unaware(
    topic_id: UUID,
    partition: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    alive: Mapping[int, str | None],
    alive_replicas: list[int],
    offline: tuple[int, ...],
) -> Route:
    if leader in alive:
        # The controller keeps an offline replica in a diskless ISR (seed 000: the ISR is
        # the replica set); clients are told the alive ones, as Inkless' transformer does.
        in_sync = tuple(r for r in isr if r in alive)
        return Route(leader, tuple(replicas), in_sync, offline, RECORDED)
    if alive_replicas:
        # The recorded leader is down and the controller has not moved it yet (it waits
        # for the session timeout): lead with an alive replica meanwhile.
        lead = pick(alive_replicas, topic_id, partition)
        in_sync = tuple(r for r in replicas if (r in isr and r in alive) or r == lead)
        return Route(lead, tuple(replicas), in_sync, offline, RECORDED, routed_around=offline)
    return _hash_any(topic_id, partition, alive, None, offline)


def _hash_any(
    topic_id: UUID,
    partition: int,
    alive: Mapping[int, str | None],
    client_az: str | None,
    offline: tuple[int, ...],
) -> Route:
    if not alive:
        return Route(-1, (), (), offline, NONE)
    az_brokers = [b for b, rack in alive.items() if rack == client_az] if client_az else []
    chosen = pick(az_brokers or list(alive), topic_id, partition)
    return Route(chosen, (chosen,), (chosen,), (), HASH, routed_around=offline, all_offline=True)


def route_without_replicas(
    topic_id: UUID, partition: int, alive: Mapping[int, str | None], client_az: str, default: int
) -> int:
    """Modes without a controller have no replica sets (any live broker serves any
    partition): an AZ-aware client gets a hashed broker of its AZ, else ``default``."""
    az_brokers = [b for b, rack in alive.items() if rack == client_az]
    return pick(az_brokers, topic_id, partition) if az_brokers else default


class DecisionLog:
    """Seed 000's transformer log lines, once per change of a partition's routing (not per
    request: clients refresh metadata every few seconds)."""

    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        # Decisions already logged: clients of different AZs get different brokers for
        # one partition, so a per-partition "last decision" would flip and log each time.
        self._seen: set[tuple[UUID, int, int, tuple[int, ...]]] = set()

    def note(self, topic_name: str, partition: int, topic_id: UUID, r: Route) -> None:
        if not r.routed_around:
            return
        key = (topic_id, partition, r.leader, r.routed_around)
        if key in self._seen:
            return
        if len(self._seen) >= self.MAX_ENTRIES:
            self._seen.clear()
        self._seen.add(key)
        if r.all_offline:
            log.warning(
                "[Transformer] Diskless partition '%s-%d' has ALL replicas offline, "
                "using hash-based fallback to broker %d",
                topic_name,
                partition,
                r.leader,
            )
            return
        offline = ", ".join(str(b) for b in r.routed_around)
        log.info(
            "[Transformer] Diskless partition '%s-%d' has offline %s %s), %s",
            topic_name,
            partition,
            "replica (broker" if len(r.routed_around) == 1 else "replicas (brokers",
            offline,
            _what_happened(r),
        )


def _what_happened(r: Route) -> str:
    """The routing of a partition with an offline replica, as it happened: seed 000's line
    says "routing to alive replica", which is true only when the answer is a replica."""
    if r.reason == AZ_HASH:
        return (
            f"routing to broker {r.leader} of the client's AZ (not a replica: none is alive "
            "there; hash-based choice)"
        )
    if r.reason == CROSS_AZ:
        others = ", ".join(str(b) for b in r.replicas)
        if len(r.replicas) == 1:
            return f"routing to alive replica (broker {others}) in another AZ"
        return f"routing to alive replicas (brokers {others}) in other AZs, leader {r.leader}"
    return f"routing to alive replica (broker {r.leader})"


@dataclass(slots=True)
class Routing:
    """One Metadata request's view: alive brokers with their racks and the client's AZ,
    computed once per request rather than per partition."""

    alive: dict[int, str | None]
    client_az: str | None
    local_fallback: bool = True

    @property
    def az_has_broker(self) -> bool:
        return self.client_az is not None and self.client_az in self.alive.values()


DECISIONS = DecisionLog()


def preferred_read_replica(
    topic_id: UUID,
    partition: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    alive: Mapping[int, str | None],
    rack: str,
    me: int,
) -> int:
    """KIP-392 for a consumer with ``client.rack`` fetching from broker ``me``: the broker
    of its rack that Metadata would give an AZ-aware client (so both paths warm the same
    cache), or -1 to serve here (that broker is this one, or the rack has none alive)."""
    chosen = route(topic_id, partition, replicas, isr, leader, alive, rack).leader
    return chosen if chosen >= 0 and chosen != me and alive.get(chosen) == rack else -1
