"""A tiny in-memory "controller process" for the logic tests: an image, the logic, a clock,
and a commit step that goes through the real encoding (so every test also exercises it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from controller.image import MetadataImage
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.records import FenceBroker, Record, decode_batch, encode_batch
from controller.requests import BrokerRegistrationRequest, NewTopic, Outcome

SESSION_MS = 9_000


def uuids(seed: int = 0) -> Any:
    """Deterministic UUIDs for topic ids."""
    n = seed << 64

    def new() -> uuid.UUID:
        nonlocal n
        n += 1
        return uuid.UUID(int=n)

    return new


class Cluster:
    def __init__(self, config: ControllerConfig | None = None, now_ms: int = 1_000) -> None:
        self.config = config or ControllerConfig(new_uuid=uuids())
        self.logic = ControllerLogic(self.config)
        self.image = MetadataImage()
        self.log: list[bytes] = []  # the committed entries
        self.now = now_ms
        self.epochs: dict[int, int] = {}
        self.logic.become_active(self.image, self.now)

    def commit(self, records: Iterable[Record] | Outcome[Any]) -> Any:
        """Proposes and commits one entry; returns the outcome's response if given one."""
        response = None
        if isinstance(records, Outcome):
            response = records.response
            records = records.records
        records = list(records)
        if records:
            entry = encode_batch(records)
            self.log.append(entry)
            self.image.apply_batch(decode_batch(entry))
        return response

    def register(self, node_id: int, rack: str | None, incarnation: uuid.UUID | None = None) -> int:
        request = BrokerRegistrationRequest(
            node_id, incarnation or uuid.uuid4(), f"host{node_id}", 9092, rack
        )
        result = self.commit(self.logic.register_broker(self.image, request, self.now))
        assert result.error_code == 0, result
        self.epochs[node_id] = result.broker_epoch
        return result.broker_epoch

    def heartbeat(self, node_id: int, **kwargs: Any) -> Any:
        return self.commit(
            self.logic.broker_heartbeat(
                self.image, node_id, self.epochs[node_id], self.now, **kwargs
            )
        )

    def start(self, racks: dict[int, str | None]) -> None:
        """Registers and unfences brokers {node_id: rack}."""
        for node_id, rack in racks.items():
            self.register(node_id, rack)
        for node_id in racks:
            assert self.heartbeat(node_id).is_fenced is False

    def advance(self, ms: int, heartbeating: Sequence[int] = ()) -> None:
        """Moves the clock; the brokers in ``heartbeating`` heartbeat, then the controller
        ticks."""
        self.now += ms
        for node_id in heartbeating:
            self.heartbeat(node_id)
        self.expire()

    def expire(self) -> list[int]:
        """Ticks until no broker is left to fence (one per tick, as the service does);
        the ids fenced, in order."""
        fenced = []
        while records := self.logic.tick(self.image, self.now):
            fenced += [r.node_id for r in records if isinstance(r, FenceBroker)]
            self.commit(records)
        return fenced

    def create(self, name: str, partitions: int, **kwargs: Any) -> Any:
        (result,) = self.commit(
            self.logic.create_topics(self.image, [NewTopic(name, partitions, **kwargs)])
        )
        return result

    def partitions(self, name: str) -> dict[int, Any]:
        topic = self.image.topic(name)
        assert topic is not None
        return topic.partitions

    def rebuilt(self) -> MetadataImage:
        """The image a follower gets by replaying the committed log."""
        image = MetadataImage()
        for entry in self.log:
            image.apply_batch(decode_batch(entry))
        return image
