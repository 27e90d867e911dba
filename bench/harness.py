"""What the benches share around their measurements: the report line, the broker config
overrides (``-o KEY=VALUE``) and the one-broker cluster on SeaweedFS + PostgreSQL that the
s3 targets run on (``bench.run``, ``bench.commit_latency``, ``bench.txn_markers``). The
figures themselves are computed in ``bench.stats``; the scratch directory is
``bench.workdir``."""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.launch.seaweedfs import roomy_volume_mb

if TYPE_CHECKING:
    from sluice.cluster import LocalCluster


def say(line: str = "") -> None:
    # Flushed at once: a bench runs for minutes, its output often piped into a file.
    print(line, flush=True)


def record_batch(records: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
    """One v2 record batch of (key, value) records, no producer id, stamped now
    (kafka-python's builder): what the raw-protocol benches send."""
    import time
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's schema loading
        from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        builder.append(i, now, key, value, [])
    return bytes(builder.build())


def add_client_options(ap: argparse.ArgumentParser, applies_to: str) -> None:
    """``-c KEY=VALUE`` (``args.client_opts``, repeatable: a client config override,
    ``applies_to`` says of which clients) and ``--bootstrap`` (an existing cluster to run
    on instead of starting any), for the benches that drive stock clients."""
    ap.add_argument(
        "-c",
        dest="client_opts",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"client config override ({applies_to})",
    )
    ap.add_argument(
        "--bootstrap",
        help="an existing cluster to run on (nothing is started): every system is that "
        "cluster, diskless and classic naming the kind of topic created",
    )


def add_broker_options(ap: argparse.ArgumentParser, applies_to: str) -> None:
    """The ``-o KEY=VALUE`` argument (``args.options``, repeatable): a broker config of
    every broker the bench starts; ``applies_to`` says which, in the help."""
    ap.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"broker config override ({applies_to})",
    )


def broker_options(pairs: Iterable[str]) -> dict[str, str]:
    """``-o`` values as configs (a later KEY wins, as in a config file)."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        options[key] = value
    return options


def as_arguments(options: Mapping[str, str]) -> list[str]:
    """Configs as ``-o`` arguments again, for ``sluice dev`` or another bench's ``main``."""
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


@contextlib.contextmanager
def one_broker(root: Path, options: Mapping[str, str]) -> Iterator[LocalCluster]:
    """One broker of a LocalCluster under ``root`` (SeaweedFS, PostgreSQL, no controller),
    stopped on the way out."""
    # Imported here: the benches that start no cluster need none of the launcher.
    from sluice.cluster import LocalCluster

    with LocalCluster(
        root, brokers=1, broker_options=dict(options), seaweed_volume_mb=roomy_volume_mb(root)
    ) as cluster:
        yield cluster


@contextlib.contextmanager
def sluice_and_kafka(
    root: Path,
    systems: Sequence[str],
    brokers: int,
    group_options: Mapping[str, str],
    options: Mapping[str, str],
    bootstrap: str | None = None,
) -> Iterator[dict[str, str]]:
    """The systems a group bench compares, as {system: bootstrap}: "diskless" and "classic"
    (topic kinds of one LocalCluster under ``root``: ``brokers`` brokers in three racks, one
    controller, SeaweedFS + PostgreSQL) and "kafka" (``brokers`` KRaft nodes of Apache
    Kafka); ``group_options`` are broker configs of both, ``options`` (``-o``) Sluice's.
    Everything started is stopped on the way out. With ``bootstrap``, nothing is started:
    every system is that cluster (its topic kind chosen by the system's name)."""
    if bootstrap:
        yield dict.fromkeys(systems, bootstrap)
        return
    boots: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if {"diskless", "classic"} & set(systems):
            from sluice.cluster import LocalCluster

            sluice = LocalCluster(
                root / "sluice",
                brokers,
                ("az-a", "az-b", "az-c"),
                {**group_options, **options},
                controllers=1,
                seaweed_volume_mb=roomy_volume_mb(root),
            )
            stack.callback(sluice.remove_data)
            stack.callback(sluice.down)
            sluice.up()
            boots["diskless"] = boots["classic"] = sluice.bootstrap
        if "kafka" in systems:
            from sluice.launch.kafka import KAFKA_VERSION, KafkaCluster

            kafka = KafkaCluster(root / "kafka", brokers, overrides=dict(group_options))
            stack.callback(kafka.down)
            kafka.up()
            boots["kafka"] = kafka.bootstrap
            say(f"  Apache Kafka {KAFKA_VERSION}, {brokers} KRaft node(s)")
        yield boots


def serve_until(poll: Callable[[float], object], until: float, stop: threading.Event) -> None:
    """Serve the producer's callbacks until ``until`` (``time.perf_counter``). One
    ``Producer.poll(timeout)`` returns as soon as it served an event, a delivery report
    included, not after ``timeout``: pacing on a single call let the producer run as fast
    as its records were acknowledged, about 14x the intended rate on a classic topic
    (acknowledged from the local log within milliseconds) against the intended rate on a
    diskless one (acknowledged after an object upload), so that the two topic kinds were
    measured under different loads."""
    while not stop.is_set() and (left := until - time.perf_counter()) > 0:
        poll(left)
