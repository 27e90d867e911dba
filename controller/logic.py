"""The active controller's decisions: requests in, metadata records to propose out.

``ControllerLogic`` is pure and synchronous: no I/O, no clock (time comes in as ``now_ms``).
Every method reads an image and returns records without changing the image; the process
running it proposes the records of one call as one Raft entry and applies them once
committed. Two rules for that process:

- Call the logic with an image that already holds every record it proposed before (wait for
  each commit before the next call, or keep a speculative copy, ``image.copy()``, with the
  proposed records applied, and drop it when leadership is lost). Otherwise two quick
  CreateTopics for one name would both succeed.
- After winning an election, apply everything up to the new leader's own first entry before
  serving requests (KRaft does the same): entries of older terms may commit later and the
  decisions must take them into account.

The only state kept here is soft: the last heartbeat time of each broker, which KRaft does not
log either. A controller that takes over (``become_active``) gives every broker a fresh
session, so a failover never fences brokers that simply talked to the old controller.

Broker lifecycle, as in KRaft: a registration is fenced; the first heartbeat (without
``want_fence``) unfences it; a broker silent for the session timeout is fenced by ``tick``;
``want_shutdown`` fences at once (leaderships move first) and answers ``should_shut_down``.
Every fence/unfence comes with the PartitionChange records that move leaders and ISRs (see
``controller.election``), in the same batch: records that stop leaderships go before the
FenceBroker, the UnfenceBroker before those that give leaderships back.

Topic requests live in ``controller.topic_admin``, reassignments in
``controller.reassignment``, classic partitions' ISR changes in ``controller.alter_partition``;
``ControllerLogic`` gathers them. Diskless topics get the seed's managed RF (one replica per
rack); classic topics (``diskless.enable=false``) Kafka's rack-aware placement with any RF
(``controller.classic_placement``) and leader election from the ISR
(``controller.classic_election``). Until brokers serve classic topics, creating one is
refused unless ``ControllerConfig.classic_topics`` (``controller.logic_config``) is set.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from .alter_partition import IsrAdmin
from .election import alive_after, reelect
from .image import BrokerRegistration, MetadataImage
from .leader_election import LeaderElectionAdmin
from .logic_config import ControllerConfig
from .migration import MigrationAdmin
from .reassignment import ReassignmentAdmin
from .records import FenceBroker, Record, RegisterBroker, UnfenceBroker, UnregisterBroker
from .requests import (
    BrokerRegistrationRequest,
    ErrorResult,
    HeartbeatResult,
    Outcome,
    RegistrationResult,
)
from .tiering import TieringAdmin
from .topic_admin import OK, TopicAdmin


class ControllerLogic(
    TopicAdmin, ReassignmentAdmin, IsrAdmin, TieringAdmin, LeaderElectionAdmin, MigrationAdmin
):
    """The whole API: broker lifecycle here; topics, reassignments and classic partitions'
    ISR changes from the mixins."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        # node id -> last heartbeat (or session start), in ms. Soft state, not in the log.
        self._last_heartbeat: dict[int, int] = {}

    # --- broker lifecycle ----------------------------------------------------------------

    def become_active(self, image: MetadataImage, now_ms: int) -> None:
        """This controller just became the active one: every broker gets a fresh session."""
        self._last_heartbeat = {node_id: now_ms for node_id in image.brokers}

    def _session_alive(self, broker: BrokerRegistration, now_ms: int) -> bool:
        last = self._last_heartbeat.get(broker.node_id, now_ms)
        return not broker.fenced and now_ms - last <= self.config.session_timeout_ms

    def _fence_records(
        self, image: MetadataImage, brokers: Sequence[BrokerRegistration]
    ) -> list[Record]:
        alive = alive_after(image, fenced=[b.node_id for b in brokers])
        return [
            *reelect(image, alive),
            *(FenceBroker(b.node_id, b.broker_epoch) for b in brokers),
        ]

    def register_broker(
        self, image: MetadataImage, request: BrokerRegistrationRequest, now_ms: int
    ) -> Outcome[RegistrationResult]:
        cfg = self.config
        if cfg.cluster_id is not None and request.cluster_id not in (None, cfg.cluster_id):
            return Outcome(
                [],
                RegistrationResult(
                    ErrorCode.inconsistent_cluster_id,
                    f"Broker is in cluster {request.cluster_id}, this controller's is "
                    f"{cfg.cluster_id}",
                ),
            )
        if request.node_id < 0:
            return Outcome(
                [], RegistrationResult(ErrorCode.invalid_request, "Broker id must be >= 0")
            )
        existing = image.brokers.get(request.node_id)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            # A retry by the same process (its answer was lost): same epoch. Changed
            # listener or rack: the registration is amended, still with the same epoch.
            self._last_heartbeat[request.node_id] = now_ms
            same = (existing.host, existing.port, existing.rack, existing.listeners) == (
                request.host,
                request.port,
                request.rack,
                tuple(request.listeners),
            )
            records: list[Record] = []
            if not same:
                records.append(
                    RegisterBroker(
                        existing.node_id,
                        existing.incarnation_id,
                        existing.broker_epoch,
                        request.host,
                        request.port,
                        request.rack,
                        existing.fenced,
                        tuple(request.listeners),
                    )
                )
            return Outcome(records, RegistrationResult(OK, None, existing.broker_epoch))
        if (
            existing is not None
            and self._session_alive(existing, now_ms)
            and (existing.host, existing.port) != (request.host, request.port)
        ):
            # A new incarnation at the same address replaces the old one at once: brokers
            # bind their listener before registering, so the old incarnation cannot be
            # serving there any more (a restart after a crash). Waiting out its session
            # kept the broker's partitions unavailable for that long. At another address
            # it is a second live broker with the same node.id: refused.
            return Outcome(
                [],
                RegistrationResult(
                    ErrorCode.duplicate_broker_registration,
                    f"Another broker is registered with id {request.node_id} and its "
                    "session has not expired",
                ),
            )
        epoch = image.last_broker_epoch + 1
        out: list[Record] = []
        if existing is not None and not existing.fenced:
            # The old incarnation still leads partitions: move them, as if it was fenced.
            out += reelect(image, alive_after(image, fenced=[existing.node_id]))
        out.append(
            RegisterBroker(
                request.node_id,
                request.incarnation_id,
                epoch,
                request.host,
                request.port,
                request.rack,
                fenced=True,
                listeners=tuple(request.listeners),
            )
        )
        self._last_heartbeat[request.node_id] = now_ms
        return Outcome(out, RegistrationResult(OK, None, epoch))

    def broker_heartbeat(
        self,
        image: MetadataImage,
        node_id: int,
        broker_epoch: int,
        now_ms: int,
        want_fence: bool = False,
        want_shutdown: bool = False,
    ) -> Outcome[HeartbeatResult]:
        """``want_fence``: the broker is not ready (e.g. has not caught up with the metadata
        log) and must stay, or become, fenced. The answer's ``is_fenced`` is the state once
        the records are committed."""
        broker = image.brokers.get(node_id)
        if broker is None:
            return Outcome(
                [],
                HeartbeatResult(
                    ErrorCode.broker_id_not_registered, f"Broker {node_id} is not registered"
                ),
            )
        if broker.broker_epoch != broker_epoch:
            return Outcome(
                [],
                HeartbeatResult(
                    ErrorCode.stale_broker_epoch,
                    f"Broker {node_id} has epoch {broker.broker_epoch}, not {broker_epoch}",
                ),
            )
        self._last_heartbeat[node_id] = now_ms
        if want_shutdown or (want_fence and not broker.fenced):
            records = [] if broker.fenced else self._fence_records(image, [broker])
            return Outcome(records, HeartbeatResult(OK, None, True, want_shutdown))
        if broker.fenced and not want_fence:
            alive = alive_after(image, unfenced=[node_id])
            records = [
                UnfenceBroker(node_id, broker.broker_epoch),
                *reelect(image, alive, returning={node_id}),
            ]
            return Outcome(records, HeartbeatResult(OK, None, False))
        return Outcome([], HeartbeatResult(OK, None, broker.fenced))

    def tick(self, image: MetadataImage, now_ms: int) -> list[Record]:
        """Fences one unfenced broker whose session expired, the one silent longest (then
        the lowest id): leaders and ISRs moved away from it, then its FenceBroker record.
        The caller ticks again once those are applied, until a tick returns nothing.

        One at a time, as Kafka's controller (maybeFenceOneStaleBroker), so that each
        fence elects among the brokers still unfenced, and the ISR of a partition whose
        replicas all expire keeps the one that went silent last rather than the leader:
        after a controller failover that every broker's heartbeats missed, the leader that
        had died first is fenced first, and a partition can be led again as soon as one of
        the others is back (all fenced in one batch, the ISR kept only the dead leader)."""
        for node_id in [n for n in self._last_heartbeat if n not in image.brokers]:
            del self._last_heartbeat[node_id]
        stalest: tuple[int, int] | None = None
        for node_id in sorted(image.brokers):
            broker = image.brokers[node_id]
            # A broker this controller has not heard of yet starts its session now.
            last = self._last_heartbeat.setdefault(node_id, now_ms)
            expired = not broker.fenced and now_ms - last > self.config.session_timeout_ms
            if expired and (stalest is None or (last, node_id) < stalest):
                stalest = (last, node_id)
        if stalest is None:
            return []
        return self._fence_records(image, [image.brokers[stalest[1]]])

    def unregister_broker(self, image: MetadataImage, node_id: int) -> Outcome[ErrorResult]:
        """Removes a broker for good (its replicas stay, offline, until reassigned)."""
        broker = image.brokers.get(node_id)
        if broker is None:
            return Outcome(
                [],
                ErrorResult(
                    ErrorCode.broker_id_not_registered, f"Broker {node_id} is not registered"
                ),
            )
        self._last_heartbeat.pop(node_id, None)
        # Also when fenced: a diskless leader stays on a lost broker, but not on one that is
        # gone for good.
        records: list[Record] = [
            *reelect(image, alive_after(image, fenced=[node_id]), departed={node_id})
        ]
        records.append(UnregisterBroker(node_id, broker.broker_epoch))
        return Outcome(records, ErrorResult(OK))
