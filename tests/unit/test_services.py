"""The Protocols handlers and components are typed against (issue 26 item 2: each module
names the services it uses instead of taking the Broker) are met by what is passed to
them. No type checker runs in CI, so a member a Protocol declares but its provider lacks
would only show as an AttributeError on some request: checked here, by name."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Protocol

import pytest

from broker.groups.service import GroupService
from broker.logs.classic.replica_fetcher import FetcherOwner
from broker.logs.classic.replica_manager import ClassicHost, MigrationRules, ReplicaManager, Sealing
from broker.logs.classic.tiered_part import Tiering
from broker.logs.classic.txn_verification import TransactionVerifier
from broker.logs.engines import EngineHost
from broker.logs.migration.sealer import MigrationSealer
from broker.logs.router import ClassicReplicas, LogRouter, RoutingView
from broker.logs.tiered.manager import TieringManager
from broker.metadata.metadata_handler import ClientRouting
from broker.node import Broker
from broker.server.api_table import Services
from broker.transactions.txn_coordinator import Markers, TransactionCoordinator
from broker.transactions.txn_marker_writer import MarkerWriter


def protocol_members(protocol: type) -> set[str]:
    """The names a Protocol declares, its bases' too (attributes, properties, methods)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= {n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}
    return names


def provided(cls: type) -> set[str]:
    """What an instance of ``cls`` has: its class's members and the attributes its
    ``__init__`` (or a base's) assigns to ``self``."""
    names = set(dir(cls))
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        for node in ast.walk(tree):
            targets: list[Any] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        names.add(t.attr)
    return names


# (the Protocol, what is passed where it is asked for)
PROVIDERS = [
    (Services, Broker),  # every handler's, through the API table
    (EngineHost, Broker),  # the engines, the router's rules, the replica manager
    (RoutingView, Broker),
    (ClassicHost, Broker),
    (ClassicReplicas, ReplicaManager),
    (FetcherOwner, ReplicaManager),
    (MigrationRules, LogRouter),
    (ClientRouting, LogRouter),
    (Sealing, MigrationSealer),
    (Tiering, TieringManager),
    (Markers, MarkerWriter),
    (TransactionVerifier, TransactionCoordinator),
]


@pytest.mark.parametrize(("protocol", "provider"), PROVIDERS, ids=lambda x: x.__name__)
def test_the_provider_has_every_member_the_protocol_declares(
    protocol: type, provider: type
) -> None:
    members = protocol_members(protocol)
    assert members, protocol
    assert members - provided(provider) == set()


def test_the_checks_see_a_missing_member() -> None:
    class Needs(Protocol):
        @property
        def groups(self) -> GroupService: ...

        def leader_epoch(self) -> int: ...

        absent: int

    assert protocol_members(Needs) == {"groups", "leader_epoch", "absent"}
    assert protocol_members(Needs) - provided(Broker) == {"absent"}
