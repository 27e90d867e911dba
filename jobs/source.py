"""Where a job reads a cluster's topics from, decided from its config alone.

A job reads the cluster it is pointed at and no other: a controller quorum it names, a data
directory it names, or the catalog of the coordinator database it names. The default data
directory (``./.sluice``, relative to wherever the job happens to run) is never a source by
itself: a job whose storage is PostgreSQL does not look there, and a job that names nothing
at all (the embedded SQLite default under ``./.sluice``) is refused rather than reading
whatever ``sluice dev`` left in the working directory. Each job logs the source it uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from broker.config import BrokerConfig
from controller.offline import raft_dir

DEFAULT_DATA_DIR = str(next(f.default for f in fields(BrokerConfig) if f.name == "data_dir"))


class NoTopicSource(ValueError):
    """The config does not say which cluster's topics to read, or says two things."""


@dataclass(frozen=True)
class TopicSource:
    description: str  # for the job's log: which cluster, where
    embedded_log: str | None = None  # a ``sluice dev`` controller directory to read from disk


def data_dir_named(config: BrokerConfig) -> bool:
    """Whether the config names a data directory (the CLI's ``--data-dir`` is made absolute,
    so naming ``./.sluice`` explicitly counts)."""
    return config.data_dir != DEFAULT_DATA_DIR


def topic_source(config: BrokerConfig) -> TopicSource:
    named = data_dir_named(config)
    controller_dir = os.path.abspath(os.path.join(config.data_dir, "controller"))
    embedded = named and raft_dir(controller_dir) is not None
    if config.controller_mode:
        servers = ",".join(config.controller_servers())
        if embedded:
            raise NoTopicSource(
                f"two metadata logs: the controller quorum at {servers} and the sluice dev "
                f"controller log in {controller_dir}; point the job at one (drop data.dir or "
                "controller.quorum.bootstrap.servers)"
            )
        return TopicSource(f"the controller quorum at {servers}")
    if embedded:
        return TopicSource(f"the sluice dev controller log in {controller_dir}", controller_dir)
    if config.coordinator == "postgresql":
        # The default data dir is not part of this cluster: never looked at.
        dsn = urlsplit(config.coordinator_dsn)
        where = f"{dsn.hostname or 'localhost'}:{dsn.port or 5432}{dsn.path}"
        return TopicSource(f"the catalog in the PostgreSQL coordinator at {where}")
    if not named:
        raise NoTopicSource(
            "the job names no cluster: no --data-dir (data.dir), no --controller "
            "(controller.quorum.bootstrap.servers) and no coordinator database, so it would "
            f"read whatever {os.path.abspath(DEFAULT_DATA_DIR)} holds; name the cluster's "
            "data dir, its broker config or its controllers"
        )
    catalog = os.path.abspath(os.path.join(config.data_dir, "catalog.db"))
    return TopicSource(f"the catalog in {catalog}")


def existing_topic_source(config: BrokerConfig) -> TopicSource:
    """``topic_source`` for a job a user starts: a named data dir must hold a cluster (a
    mistyped path would otherwise get empty SQLite files and a job that reads nothing)."""
    source = topic_source(config)
    in_data_dir = not config.controller_mode and config.coordinator != "postgresql"
    catalog = os.path.join(config.data_dir, "catalog.db")
    if in_data_dir and source.embedded_log is None and not os.path.exists(catalog):
        raise NoTopicSource(
            f"data dir {os.path.abspath(config.data_dir)} holds no sluice cluster "
            "(no controller/raft log, no catalog.db)"
        )
    return source
