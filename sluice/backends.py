"""Builds the storage backends a broker config names.

Embedded default: a directory and SQLite files under ``data.dir``. Production:
S3/MinIO (``object.store=s3``) and PostgreSQL (``coordinator=postgresql``), shared by
every broker of the cluster.
"""

from __future__ import annotations

import os

from broker.config import BrokerConfig
from storage.catalog import TopicCatalog
from storage.coordinator import BatchCoordinator
from storage.group_store import GroupStore
from storage.object_store import ObjectStore


def object_store(config: BrokerConfig) -> ObjectStore:
    if config.object_store == "local":
        from storage.local_store import LocalObjectStore

        return LocalObjectStore(os.path.join(config.data_dir, "objects"))
    if config.object_store == "s3":
        from storage.s3_store import S3Config, S3ObjectStore

        if not config.s3_endpoint and not config.s3_bucket:
            raise ValueError("object.store=s3 needs s3.bucket (and s3.endpoint for MinIO)")
        return S3ObjectStore(
            S3Config(
                endpoint_url=config.s3_endpoint or None,
                region=config.s3_region,
                bucket=config.s3_bucket,
                access_key=config.s3_access_key or None,
                secret_key=config.s3_secret_key or None,
                path_style=config.s3_path_style,
                key_prefix=config.s3_key_prefix,
                verify_on_start=True,
            )
        )
    raise ValueError(f"object.store must be local or s3, not {config.object_store!r}")


def coordinator_and_catalog(config: BrokerConfig) -> tuple[BatchCoordinator, TopicCatalog]:
    if config.controller_mode:
        # Controller mode: topics live in the controllers' metadata log, not the database.
        from broker.controller_catalog import ControllerCatalog

        return _coordinator(config), ControllerCatalog.from_config(config)
    if config.coordinator == "sqlite":
        from storage.sqlite_catalog import SqliteCatalog

        return (
            _coordinator(config),
            SqliteCatalog(os.path.join(config.data_dir, "catalog.db")),
        )
    if config.coordinator == "postgresql":
        from storage.postgres_catalog import PostgresCatalog
        from storage.postgres_coordinator import PostgresCoordinator

        coordinator = _coordinator(config)
        assert isinstance(coordinator, PostgresCoordinator)
        # One pool for both: it is reference-counted and applies migrations once.
        return coordinator, PostgresCatalog(coordinator.pool)
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def _coordinator(config: BrokerConfig) -> BatchCoordinator:
    if config.coordinator == "sqlite":
        from storage.sqlite_coordinator import SqliteCoordinator

        return SqliteCoordinator(os.path.join(config.data_dir, "coordinator.db"))
    if config.coordinator == "postgresql":
        from storage.postgres_coordinator import PostgresCoordinator
        from storage.postgres_pool import PostgresPool

        if not config.coordinator_dsn:
            raise ValueError("coordinator=postgresql needs coordinator.dsn")
        return PostgresCoordinator(PostgresPool(config.coordinator_dsn))
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def group_store(config: BrokerConfig, coordinator: BatchCoordinator) -> GroupStore:
    """Committed group offsets, in the batch coordinator's database."""
    if config.coordinator == "sqlite":
        from storage.sqlite_group_store import SqliteGroupStore

        return SqliteGroupStore(os.path.join(config.data_dir, "coordinator.db"))
    if config.coordinator == "postgresql":
        from storage.postgres_coordinator import PostgresCoordinator
        from storage.postgres_group_store import PostgresGroupStore

        if isinstance(coordinator, PostgresCoordinator):
            return PostgresGroupStore(coordinator.pool)  # share its pool
        return PostgresGroupStore(config.coordinator_dsn)
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def remote_log_metadata(config: BrokerConfig, coordinator: BatchCoordinator) -> object:
    """Tiered segments' metadata (storage.tiered.metadata), in the coordinator's database."""
    if config.coordinator == "sqlite":
        from storage.tiered.sqlite_metadata import SqliteRemoteLogMetadata

        return SqliteRemoteLogMetadata(os.path.join(config.data_dir, "coordinator.db"))
    from storage.postgres_coordinator import PostgresCoordinator
    from storage.tiered.postgres_metadata import PostgresRemoteLogMetadata

    if isinstance(coordinator, PostgresCoordinator):
        return PostgresRemoteLogMetadata(coordinator.pool)  # share its pool
    return PostgresRemoteLogMetadata(config.coordinator_dsn)
