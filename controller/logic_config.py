"""The settings of ``ControllerLogic``: its own module, so the topic, reassignment and other
admin mixins that read them need not import the logic that gathers them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID


def _accept_any(configs: Mapping[str, str | None]) -> None:
    return None


@dataclass(frozen=True)
class ControllerConfig:
    # Kafka's broker.session.timeout.ms default.
    session_timeout_ms: int = 9_000
    default_partitions: int = 1
    max_partitions: int = 10_000
    # Registrations naming another cluster are refused (None: not checked).
    cluster_id: str | None = None
    # Raises ValueError (message for the client) for unknown keys or bad values; given the
    # configs of a new topic, or the changes (None: delete) of an alter. The broker's
    # ``common.topic_config_validation.validate`` fits.
    validate_configs: Callable[[Mapping[str, str | None]], None] = _accept_any
    # Keys APPEND/SUBTRACT apply to, and the defaults they start from when not overridden.
    list_config_keys: frozenset[str] = frozenset({"cleanup.policy"})
    config_defaults: Mapping[str, str] = field(default_factory=lambda: {"cleanup.policy": "delete"})
    new_uuid: Callable[[], UUID] = uuid.uuid4
    # The kind of a topic created without ``diskless.enable`` (brokers' log.diskless.enable).
    default_diskless: bool = True
    # RF of a classic topic created with -1 (Kafka's default.replication.factor).
    default_replication_factor: int = 1
    # Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
    # leader.imbalance.per.broker.percentage (controller.leader_election).
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    # Classic topics are created only once brokers serve them (issue: classic topics); until
    # then ``diskless.enable=false`` is refused. Tests of the controller's side set it.
    classic_topics: bool = False
