"""Which brokers are in the cluster and alive: what Metadata lists and leaders are chosen from.

Two sources until the Raft controller (which replaces this seam) exists:

* :class:`StaticMembership` — ``cluster.brokers`` from the config, every entry deemed alive;
* :class:`RegistryMembership` — brokers heartbeat into the batch coordinator's database and
  the live ones are those seen within ``broker.session.timeout.ms`` (the database's clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass

from storage.coordinator import BatchCoordinator, BrokerRegistration, CoordinatorUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


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
        self._task: asyncio.Task[None] | None = None
        self._last_ok = 0.0  # loop time of the last heartbeat that reached the database

    def problem(self) -> str | None:
        age = asyncio.get_running_loop().time() - self._last_ok
        if age * 1000 > self._session_timeout_ms:
            return f"no heartbeat reached the coordinator for {age:.1f} s"
        return None

    def live(self) -> list[BrokerEndpoint]:
        return self._live

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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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
        return None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._beat(starting=False)
            except CoordinatorUnavailable as exc:
                log.warning("broker heartbeat failed: %s", exc)
            except Exception:
                log.exception("broker heartbeat failed")
