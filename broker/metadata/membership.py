"""Which brokers are in the cluster and alive: what Metadata lists and leaders are chosen from.

Three sources:

* :class:`StaticMembership` — ``cluster.brokers`` from the config, every entry deemed alive;
* :class:`RegistryMembership` — brokers heartbeat into the batch coordinator's database and
  the live ones are those seen within ``broker.session.timeout.ms`` (the database's clock);
* :class:`ControllerMembership` — controller mode: brokers register with the Raft controller
  and heartbeat there; the live ones are the unfenced brokers of the metadata image this
  broker follows (so every broker at the same metadata index has the same list).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerClient, ControllerRefused
from broker.metadata.metadata_follower import MetadataFollower
from common.background import cancel_and_wait
from controller.requests import BrokerRegistrationRequest, DisableRemoteAck, DisableRemoteTopic
from storage.coordinator import BatchCoordinator, BrokerRegistration, CoordinatorUnavailable
from storage.outage import OutageLog, is_outage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str  # the inter-broker listener's advertised address
    port: int
    rack: str | None
    # Every advertised listener, "NAME://host:port"; empty when only host:port is known
    # (other brokers without a controller).
    listeners: tuple[str, ...] = ()

    def on_listener(self, name: str) -> BrokerEndpoint:
        """This broker as a client of listener ``name`` must reach it. A broker that does
        not advertise that listener keeps its inter-broker address (a cluster is expected
        to list the same listener names on every broker)."""
        prefix = f"{name}://"
        for entry in self.listeners:
            if entry.startswith(prefix):
                host, _, port = entry[len(prefix) :].rpartition(":")
                return BrokerEndpoint(self.node_id, host.strip("[]"), int(port), self.rack)
        return self


class NodeIdInUse(RuntimeError):
    pass


class Membership(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def stop(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    def live(self) -> list[BrokerEndpoint]:
        """The live brokers by node id; always includes this one."""

    def watch(self, changed: Callable[[], None]) -> None:  # noqa: B027 - static: never
        """Call ``changed()`` whenever the live brokers may have changed: what is derived
        from them and kept (``ClientBytes``' labels) is made again."""

    def problem(self) -> str | None:
        """Why this broker may not be part of the cluster right now, if it may not be."""
        return None


class StaticMembership(Membership):
    def __init__(self, brokers: list[BrokerEndpoint]) -> None:
        self._brokers = sorted(brokers, key=lambda b: b.node_id)

    def live(self) -> list[BrokerEndpoint]:
        return self._brokers


class RegistryMembership(Membership):
    """Heartbeats every ``interval_ms``; each heartbeat's answer is the new live list.

    When the database cannot be reached the last known list stays: brokers do not vanish
    from Metadata because the coordinator is briefly down (produce and fetch fail with
    retriable errors then anyway).
    """

    def __init__(
        self,
        coordinator: BatchCoordinator,
        me: BrokerEndpoint,
        interval_ms: int,
        session_timeout_ms: int,
    ) -> None:
        self._coordinator = coordinator
        self._me = me
        self._registration = BrokerRegistration(me.node_id, me.host, me.port, me.rack, uuid.uuid4())
        self._interval = interval_ms / 1000
        self._session_timeout_ms = session_timeout_ms
        self._live: list[BrokerEndpoint] = [me]
        self._watchers: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._last_ok = 0.0  # loop time of the last heartbeat that reached the database

    def problem(self) -> str | None:
        age = asyncio.get_running_loop().time() - self._last_ok
        if age * 1000 > self._session_timeout_ms:
            return f"no heartbeat reached the coordinator for {age:.1f} s"
        return None

    def live(self) -> list[BrokerEndpoint]:
        return self._live

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # A restart after a crash finds its previous incarnation still "live" for up to a
        # session: wait it out, as a KRaft controller makes a re-registering broker wait.
        deadline = loop.time() + 2 * self._session_timeout_ms / 1000
        while True:
            holder = await self._beat(starting=True)
            if holder is None:
                break
            if (holder.host, holder.port) == (self._me.host, self._me.port):
                # This process has bound that address, so nothing else serves it: the
                # holder is a crashed earlier incarnation of this broker.
                await self._beat(starting=False)
                break
            if loop.time() > deadline:
                raise NodeIdInUse(
                    f"node.id {holder.node_id} is held by a live broker at "
                    f"{holder.host}:{holder.port}"
                )
            log.warning(
                "node.id %d is held by %s:%d; waiting for its session to expire",
                holder.node_id,
                holder.host,
                holder.port,
            )
            await asyncio.sleep(self._interval)
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None
        # Leaving at once lets the others route around this broker without waiting
        # for the session timeout.
        with contextlib.suppress(CoordinatorUnavailable):
            await self._coordinator.broker_leave(self._registration)

    async def _beat(self, starting: bool) -> BrokerRegistration | None:
        """One heartbeat; returns the other incarnation holding this node id, if any."""
        rows = await self._coordinator.broker_heartbeat(
            self._registration, self._session_timeout_ms, starting
        )
        mine = self._registration.incarnation
        for row in rows:
            if row.node_id == self._me.node_id and row.incarnation != mine:
                return row
        self._last_ok = asyncio.get_running_loop().time()
        live = [BrokerEndpoint(r.node_id, r.host, r.port, r.rack) for r in rows]
        if self._me.node_id not in {b.node_id for b in live}:
            live = sorted([*live, self._me], key=lambda b: b.node_id)
        if live != self._live:
            log.info("live brokers: %s", ", ".join(str(b.node_id) for b in live))
            self._live = live
            for changed in self._watchers:
                changed()
        return None

    async def _loop(self) -> None:
        outage = OutageLog("broker heartbeat", log)
        while True:
            await asyncio.sleep(self._interval)
            with outage:
                await self._beat(starting=False)


class ControllerRequests(Protocol):
    """What acts on the controller's requests that heartbeat answers carry (KIP-950's
    DisableRemoteTopic: ``broker.logs.tiered.manager``), and holds its answers until a
    heartbeat that carried them is answered."""

    def answers(self) -> list[DisableRemoteAck]: ...

    def answered(self, acks: Sequence[DisableRemoteAck]) -> None: ...

    def on_disable_remote(self, requests: Sequence[DisableRemoteTopic]) -> None: ...


class ControllerMembership(Membership):
    """Kafka's broker lifecycle against the Raft controller (KRaft semantics).

    ``start`` registers with a fresh incarnation id (a crashed earlier incarnation whose
    session has not expired yet gets DUPLICATE_BROKER_REGISTRATION: wait and retry, as a
    KRaft broker does), waits until the followed image includes its registration, then
    heartbeats every ``interval_ms``. The controller keeps a registration fenced until a
    heartbeat without ``want_fence``; this broker asks to stay fenced while its image is
    older than its registration. A stale epoch or an unknown registration (the controller
    dropped it) makes it register again. ``stop`` is a controlled shutdown: a heartbeat
    with ``want_shutdown`` fences it at once and moves its leaderships.
    """

    def __init__(
        self,
        client: ControllerClient,
        follower: MetadataFollower,
        me: BrokerEndpoint,
        interval_ms: int,
        session_timeout_ms: int,
        cluster_id: str | None = None,
    ) -> None:
        self._client = client
        self._follower = follower
        self._me = me
        self._interval = interval_ms / 1000
        self._session_timeout_ms = session_timeout_ms
        self._cluster_id = cluster_id
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self._registered_at = 0  # the metadata index that includes the registration
        self._last_ok = 0.0  # loop time of the last heartbeat the controller accepted
        self._live: tuple[int, list[BrokerEndpoint]] = (-1, [me])
        self._task: asyncio.Task[None] | None = None
        # Set by the broker when it has classic partitions (KIP-950's DisableRemoteTopic).
        self.requests: ControllerRequests | None = None
        self._beat_now = asyncio.Event()
        self._unfenced = asyncio.Event()

    async def wait_unfenced(self) -> None:
        """Until the controller has unfenced this broker (Kafka's broker opens its
        listeners only then: a broker serving while fenced accepted CreateTopics that the
        controller could not place on it). Said every 30 s while it waits."""
        while True:
            try:
                await asyncio.wait_for(self._unfenced.wait(), 30.0)
                return
            except TimeoutError:
                log.warning(
                    "broker %d: still fenced by the controller (%s); not serving clients yet",
                    self._me.node_id,
                    self.problem() or "waiting for its heartbeat",
                )

    def beat_soon(self) -> None:
        """Heartbeat now, not at the next interval: answers to the controller wait."""
        self._beat_now.set()

    async def start(self) -> None:
        await self._register(starting=True)
        # Unfenced as soon as the image has caught up, not one interval later.
        await self._follower.wait_for(self._registered_at, self._session_timeout_ms / 1000)
        with contextlib.suppress(ControllerRefused):
            await self._beat()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None
        if self.broker_epoch < 0:
            return
        try:
            await self._client.heartbeat(
                self._me.node_id, self.broker_epoch, want_shutdown=True, deadline=3.0
            )
        except ControllerRefused as exc:
            log.warning("controlled shutdown heartbeat failed: %s", exc.message)

    def watch(self, changed: Callable[[], None]) -> None:
        # The live brokers are the image's: any change of it may change them. (The
        # follower outlives a broker's restart: the same view is not added twice.)
        if changed not in self._follower.on_change:
            self._follower.on_change.append(changed)

    def live(self) -> list[BrokerEndpoint]:
        version, live = self._live
        if version == self._follower.version:
            return live
        image = self._follower.image
        live = [
            BrokerEndpoint(b.node_id, b.host, b.port, b.rack, b.listeners)
            for b in image.brokers.values()
            if not b.fenced and b.node_id != self._me.node_id
        ]
        live = sorted([*live, self._me], key=lambda b: b.node_id)
        if [b.node_id for b in live] != [b.node_id for b in self._live[1]]:
            log.info("live brokers: %s", ", ".join(str(b.node_id) for b in live))
        self._live = (self._follower.version, live)
        return live

    def problem(self) -> str | None:
        if self.broker_epoch < 0:
            return "not registered with the controller"
        age = asyncio.get_running_loop().time() - self._last_ok
        if age * 1000 > self._session_timeout_ms:
            return f"no heartbeat reached the controller for {age:.1f} s"
        if self.fenced:
            return "fenced by the controller"
        return None

    async def _register(self, starting: bool) -> None:
        loop = asyncio.get_running_loop()
        # A restart after a crash finds its previous incarnation registered until its
        # session expires: wait that long (twice, for slack), then give up.
        deadline = loop.time() + 2 * self._session_timeout_ms / 1000 + self._interval
        request = BrokerRegistrationRequest(
            self._me.node_id,
            self.incarnation_id,
            self._me.host,
            self._me.port,
            self._me.rack,
            self._cluster_id,
            self._me.listeners,
        )
        while True:
            try:
                result, applied = await self._client.register(request)
            except ControllerRefused as exc:
                log.warning("registering with the controller: %s", exc.message)
                await asyncio.sleep(self._interval)
                continue
            if result.error_code == ErrorCode.none:
                self.broker_epoch = result.broker_epoch
                self._registered_at = applied
                self._last_ok = loop.time()
                log.info(
                    "registered with the controller: broker %d epoch %d",
                    self._me.node_id,
                    self.broker_epoch,
                )
                return
            if result.error_code == ErrorCode.duplicate_broker_registration:
                if starting and loop.time() > deadline:
                    raise NodeIdInUse(result.error_message or "node.id is registered")
                log.warning(
                    "node.id %d: %s; waiting for that session to expire",
                    self._me.node_id,
                    result.error_message,
                )
                await asyncio.sleep(self._interval)
                continue
            raise RuntimeError(
                f"the controller refused the registration of broker {self._me.node_id}: "
                f"{result.error_code.name}: {result.error_message}"
            )

    async def _beat(self) -> None:
        want_fence = self._follower.applied < self._registered_at
        answers = self.requests.answers() if self.requests is not None else []
        # Retried at the broker's own pace, each attempt bounded by a third of a session:
        # a controller that stopped answering (paused, cut off) or died must not keep this
        # broker from reaching the next active one before its session there expires.
        result, _ = await self._client.heartbeat(
            self._me.node_id,
            self.broker_epoch,
            want_fence=want_fence,
            disabled_remote=answers,
            max_backoff=self._interval,
            timeout=min(self._client.request_timeout, self._session_timeout_ms / 3000),
        )
        if self.requests is not None and result.error_code == ErrorCode.none:
            # Recorded by the controller (or refused for good): not sent again; and what
            # is still to do, acted on at once.
            self.requests.answered(answers)
            if result.disable_remote:
                self.requests.on_disable_remote(result.disable_remote)
        if result.error_code in (
            ErrorCode.stale_broker_epoch,
            ErrorCode.broker_id_not_registered,
        ):
            log.warning("heartbeat refused (%s): registering again", result.error_message)
            self.fenced = True
            await self._register(starting=False)
            return
        if result.error_code != ErrorCode.none:
            log.warning("heartbeat refused: %s", result.error_message)
            return
        self._last_ok = asyncio.get_running_loop().time()
        if result.is_fenced != self.fenced:
            log.info("broker %d %s", self._me.node_id, "fenced" if result.is_fenced else "unfenced")
        self.fenced = result.is_fenced
        if not self.fenced:
            self._unfenced.set()  # once: a broker fenced later (a lost session) keeps serving

    async def _loop(self) -> None:
        outage = OutageLog("broker heartbeat", log)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), self._interval)
            self._beat_now.clear()
            with outage:
                try:
                    await self._beat()
                except ControllerRefused as exc:
                    if is_outage(exc):
                        raise  # said once by the outage log
                    log.warning("broker heartbeat failed: %s", exc.message)  # an answer
