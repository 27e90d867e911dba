"""The broker's checks of remote.storage.enable (the controller checks the rest: diskless,
compaction, local vs total retention)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.metadata.topics import TopicRegistry
from common import topic_config_validation


class _Controller(TopicRegistry):
    """A registry whose topics go to controllers (the only mode with classic topics)."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(None, None, config)  # type: ignore[arg-type]
        self._controller = object()  # type: ignore[assignment]


def test_the_validator_accepts_the_tiering_keys() -> None:
    topic_config_validation.validate(
        {
            "remote.storage.enable": "true",
            "local.retention.ms": "-2",
            "local.retention.bytes": "1000",
            "remote.log.disable.policy": "delete",
            "remote.log.copy.disable": "true",
            "remote.log.delete.on.disable": "false",
        }
    )


def test_remote_storage_needs_the_brokers_remote_storage_system() -> None:
    off = _Controller(BrokerConfig(remote_log_storage_system_enable=False))
    with pytest.raises(topic_config_validation.InvalidConfig, match="disabled in the broker"):
        off._check_tiering({"remote.storage.enable": "true"})
    off._check_tiering({"remote.storage.enable": "false"})  # disabling is always allowed
    _Controller(BrokerConfig())._check_tiering({"remote.storage.enable": "true"})


def test_without_controllers_every_topic_is_diskless_and_refuses_it() -> None:
    registry = TopicRegistry(None, None, BrokerConfig())  # type: ignore[arg-type]
    with pytest.raises(topic_config_validation.InvalidConfig, match="diskless"):
        registry._check_tiering({"remote.storage.enable": "TRUE"})
