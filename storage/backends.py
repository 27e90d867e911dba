"""Builds the storage backends a configuration names.

Embedded default: a directory and SQLite files under ``data.dir``. Production:
S3/MinIO (``object.store=s3``) and PostgreSQL (``coordinator=postgresql``), shared by
every broker of the cluster.

The configuration is anything with the attributes of :class:`StorageConfig` (the
broker's config has them): storage does not depend on the broker.
"""

from __future__ import annotations

import os
from typing import Protocol

from storage.catalog import TopicCatalog
from storage.coordinator import BatchCoordinator
from storage.groups import GroupStore
from storage.objects import ObjectStore
from storage.share_groups import ShareStateStore


class StorageConfig(Protocol):
    """The settings the backends are built from (``broker.config.BrokerConfig`` has them)."""

    @property
    def data_dir(self) -> str: ...
    @property
    def object_store(self) -> str: ...
    @property
    def s3_endpoint(self) -> str: ...
    @property
    def s3_region(self) -> str: ...
    @property
    def s3_bucket(self) -> str: ...
    @property
    def s3_access_key(self) -> str: ...
    @property
    def s3_secret_key(self) -> str: ...
    @property
    def s3_path_style(self) -> bool: ...
    @property
    def s3_key_prefix(self) -> str: ...
    @property
    def coordinator(self) -> str: ...
    @property
    def coordinator_dsn(self) -> str: ...


def object_store(config: StorageConfig) -> ObjectStore:
    if config.object_store == "local":
        from storage.objects.local import LocalObjectStore

        return LocalObjectStore(os.path.join(config.data_dir, "objects"))
    if config.object_store == "s3":
        from storage.objects.s3 import S3Config, S3ObjectStore

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


def coordinator_and_catalog(
    config: StorageConfig, catalog: TopicCatalog | None = None
) -> tuple[BatchCoordinator, TopicCatalog]:
    """The batch coordinator and the topic catalog. ``catalog``: one kept elsewhere (in
    controller mode, the controllers' metadata log); None for the one in the
    coordinator's database."""
    if catalog is not None:
        return _coordinator(config), catalog
    if config.coordinator == "sqlite":
        from storage.catalog.sqlite import SqliteCatalog

        return (
            _coordinator(config),
            SqliteCatalog(os.path.join(config.data_dir, "catalog.db")),
        )
    if config.coordinator == "postgresql":
        from storage.catalog.postgres import PostgresCatalog
        from storage.coordinator.postgres import PostgresCoordinator

        coordinator = _coordinator(config)
        assert isinstance(coordinator, PostgresCoordinator)
        # One pool for both: it is reference-counted and applies migrations once.
        return coordinator, PostgresCatalog(coordinator.pool)
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def _coordinator(config: StorageConfig) -> BatchCoordinator:
    if config.coordinator == "sqlite":
        from storage.coordinator.sqlite import SqliteCoordinator

        return SqliteCoordinator(os.path.join(config.data_dir, "coordinator.db"))
    if config.coordinator == "postgresql":
        from storage.coordinator.postgres import PostgresCoordinator
        from storage.postgres.pool import PostgresPool

        if not config.coordinator_dsn:
            raise ValueError("coordinator=postgresql needs coordinator.dsn")
        return PostgresCoordinator(PostgresPool(config.coordinator_dsn))
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def group_store(config: StorageConfig, coordinator: BatchCoordinator) -> GroupStore:
    """Committed group offsets, in the batch coordinator's database."""
    if config.coordinator == "sqlite":
        from storage.groups.sqlite import SqliteGroupStore

        return SqliteGroupStore(os.path.join(config.data_dir, "coordinator.db"))
    if config.coordinator == "postgresql":
        from storage.coordinator.postgres import PostgresCoordinator
        from storage.groups.postgres import PostgresGroupStore

        if isinstance(coordinator, PostgresCoordinator):
            return PostgresGroupStore(coordinator.pool)  # share its pool
        return PostgresGroupStore(config.coordinator_dsn)
    raise ValueError(f"coordinator must be sqlite or postgresql, not {config.coordinator!r}")


def remote_log_metadata(config: StorageConfig, coordinator: BatchCoordinator) -> object:
    """Tiered segments' metadata (storage.tiered.metadata), in the coordinator's database."""
    if config.coordinator == "sqlite":
        from storage.tiered.metadata.sqlite import SqliteRemoteLogMetadata

        return SqliteRemoteLogMetadata(os.path.join(config.data_dir, "coordinator.db"))
    from storage.coordinator.postgres import PostgresCoordinator
    from storage.tiered.metadata.postgres import PostgresRemoteLogMetadata

    if isinstance(coordinator, PostgresCoordinator):
        return PostgresRemoteLogMetadata(coordinator.pool)  # share its pool
    return PostgresRemoteLogMetadata(config.coordinator_dsn)


def share_state_store(config: StorageConfig, coordinator: BatchCoordinator) -> ShareStateStore:
    """Share groups' share-partition state (storage.share_groups), in the coordinator's
    database."""
    if config.coordinator == "sqlite":
        from storage.share_groups.sqlite import SqliteShareStateStore

        return SqliteShareStateStore(os.path.join(config.data_dir, "coordinator.db"))
    from storage.coordinator.postgres import PostgresCoordinator
    from storage.share_groups.postgres import PostgresShareStateStore

    if isinstance(coordinator, PostgresCoordinator):
        return PostgresShareStateStore(coordinator.pool)  # share its pool
    return PostgresShareStateStore(config.coordinator_dsn)
