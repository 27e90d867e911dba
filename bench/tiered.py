"""Tiered storage of classic topics on one 3-broker cluster (3 racks, 1 controller,
SeaweedFS + PostgreSQL), one run.

Each of ``--repeats`` runs:

1. produces ``--mib`` MiB of 1 KiB records (acks=all) into a classic RF=3 topic with
   tiering off (8 MiB segments, ``local.retention.bytes=1``), then turns
   ``remote.storage.enable`` on and times how long the leaders take to copy every rolled
   segment (the last tiered offset, ListOffsets -5, polled every 20 ms, reaching each
   partition's last rolled offset): copy MiB/s;
2. PUTs the same number of objects of the same size to the same store, one at a time as a
   leader's copier does: the raw PUT MiB/s that copying is judged against;
3. once local retention deleted the tiered segments from every broker's disk, a consumer
   reads the topic from offset 0, all of it from remote segments: MiB/s and broker CPU
   (all three processes) per MiB;
4. produces the same data to a diskless topic and reads it back the same way: the
   reference for step 3.

Medians of the runs are printed with the ratios. ``python -m bench.tiered --quick`` or
``bench/run --targets tiered``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.list_offsets.v8 import request as offsets_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from broker.logs.classic.kafka_client import KafkaConnection
from sluice.cluster import LocalCluster

from .produce_consume import PARTITIONS, RECORD_SIZE, consume
from .stats import MiB, ProcStats, med

SEGMENT_BYTES = 8 * MiB
LATEST_TIERED = -5


def produce(bootstrap: str, topic: str, mib: float) -> int:
    n = int(mib * MiB) // RECORD_SIZE
    payload = os.urandom(RECORD_SIZE)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 262_144,
            "queue.buffering.max.kbytes": 65_536,
        }
    )
    for i in range(n):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.005)
    assert producer.flush(120) == 0
    return n


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in md.partitions.values()}


def segment_files(cluster: LocalCluster, node: int, topic: str, partition: int) -> list[Path]:
    directory = Path(cluster.broker(node).data_dir) / f"{topic}-{partition}"
    return sorted(directory.glob("*.log"), key=lambda p: int(p.name[:-4]))


async def tiered_ends(cluster: LocalCluster, lead: dict[int, int], topic: str) -> dict[int, int]:
    """Each partition's last tiered offset, from its leader (ListOffsets -5)."""
    out: dict[int, int] = {}
    for node in set(lead.values()):
        b = cluster.broker(node)
        host, port = b.bootstrap.rsplit(":", 1)
        conn = KafkaConnection(host, int(port), "bench-tiered")
        try:
            parts = [p for p, n in lead.items() if n == node]
            request = offsets_req.ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=(
                    offsets_req.ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=tuple(
                            offsets_req.ListOffsetsPartition(
                                partition_index=i32(p), timestamp=i64(LATEST_TIERED)
                            )
                            for p in parts
                        ),
                    ),
                ),
            )
            response = await conn.request(request, 10.0)
            for t in response.topics:
                for r in t.partitions:
                    out[int(r.partition_index)] = int(r.offset)
        finally:
            conn.close()
    return out


def time_copy(cluster: LocalCluster, admin: AdminClient, topic: str, budget: float) -> dict:
    """Turn tiering on; seconds until every rolled segment is tiered, and their bytes."""
    lead = leaders(admin, topic)
    want: dict[int, int] = {}
    copied_bytes = 0
    sizes: list[int] = []
    for p, node in lead.items():
        files = segment_files(cluster, node, topic, p)
        want[p] = int(files[-1].name[:-4]) - 1  # the active segment is never copied
        sizes += [f.stat().st_size for f in files[:-1]]
    copied_bytes = sum(sizes)
    entry = ConfigEntry(
        "remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    start = time.perf_counter()
    admin.incremental_alter_configs([resource])[resource].result(30)
    while time.perf_counter() - start < budget:
        ends = asyncio.run(tiered_ends(cluster, lead, topic))
        if all(ends.get(p, -1) >= w for p, w in want.items()):
            break
        time.sleep(0.02)
    else:
        raise RuntimeError("copying did not finish within the budget")
    seconds = time.perf_counter() - start
    return {"mib": copied_bytes / MiB, "mib_s": copied_bytes / MiB / seconds, "sizes": sizes}


def raw_put_mib_s(cluster: LocalCluster, sizes: list[int]) -> float:
    """The same objects PUT one at a time to the same bucket (then deleted)."""
    from storage.objects.s3 import S3ObjectStore

    s3 = cluster.s3
    store = S3ObjectStore(s3.store_config())
    body = os.urandom(max(sizes))

    async def run() -> float:
        await store.start()
        keys = [f"bench-raw/{uuid.uuid4()}" for _ in sizes]
        try:
            start = time.perf_counter()
            for key, size in zip(keys, sizes, strict=True):
                await store.put(key, [body[:size]])
            return sum(sizes) / MiB / (time.perf_counter() - start)
        finally:
            await store.delete_many(keys)
            await store.close()

    return asyncio.run(run())


def broker_cpu(cluster: LocalCluster) -> float:
    return sum(ProcStats(b.pid).tree_cpu_seconds() for b in cluster.brokers)


def timed_consume(cluster: LocalCluster, topic: str, records: int, budget: float) -> dict:
    cpu0 = broker_cpu(cluster)
    got, seconds = consume(cluster.bootstrap, topic, records, budget)
    mib = got * RECORD_SIZE / MiB
    return {
        "mib_s": mib / seconds if seconds else 0.0,
        "cpu_ms_per_mib": (broker_cpu(cluster) - cpu0) * 1000 / max(mib, 1e-9),
        "complete": got >= records,
    }


def wait_local_deleted(cluster: LocalCluster, topic: str, replicas: int, budget: float) -> None:
    """Until every replica keeps only its active segment (the rest read from remote)."""
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        if all(
            len(segment_files(cluster, b.node_id, topic, p)) <= 1
            for b in cluster.brokers[:replicas]
            for p in range(PARTITIONS)
        ):
            return
        time.sleep(0.05)
    raise RuntimeError("local retention did not delete the tiered segments")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.tiered", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=128, help="MiB produced per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per phase at most")
    ap.add_argument("--quick", action="store_true", help="48 MiB, 3 runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.mib = 48
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-tiered-"))
    print(f"tiered storage: {args.mib:g} MiB x {args.repeats} runs, {PARTITIONS} partitions")
    cluster = LocalCluster(
        root / "cluster",
        3,
        ("az-a", "az-b", "az-c"),
        {
            "produce.commit.interval.ms": "20",
            "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "200",
        },
        controllers=1,
    )
    cluster.up()
    rows: list[dict] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for _run in range(args.repeats):
            name = f"bench-t-{uuid.uuid4().hex[:8]}"
            configs = {
                "diskless.enable": "false",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": "1",
            }
            admin.create_topics([NewTopic(name, PARTITIONS, 3, config=configs)])[name].result(30)
            time.sleep(1.0)  # leaders and followers in place
            records = produce(cluster.bootstrap, name, args.mib)
            row = time_copy(cluster, admin, name, args.budget)
            row["put_mib_s"] = raw_put_mib_s(cluster, row.pop("sizes"))
            wait_local_deleted(cluster, name, 3, args.budget)
            remote = timed_consume(cluster, name, records, args.budget)
            diskless = f"bench-d-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(diskless, PARTITIONS)])[diskless].result(30)
            produce(cluster.bootstrap, diskless, args.mib)
            local = timed_consume(cluster, diskless, records, args.budget)
            row.update(
                remote_mib_s=remote["mib_s"],
                remote_cpu=remote["cpu_ms_per_mib"],
                remote_complete=remote["complete"],
                diskless_mib_s=local["mib_s"],
                diskless_cpu=local["cpu_ms_per_mib"],
            )
            rows.append(row)
            admin.delete_topics([name, diskless])

        def m(key: str) -> float:
            return med([r[key] for r in rows])

        print(f"  copy to remote: {m('mib_s'):.1f} MiB/s ({m('mib'):.0f} MiB of segments)")
        print(
            f"  raw PUT, same store, same objects one at a time: {m('put_mib_s'):.1f} MiB/s"
            f"  -> copy / PUT = {m('mib_s') / m('put_mib_s'):.2f}"
        )
        print(
            f"  {'consume from offset 0':<28}{'MiB/s':>8}{'CPU ms/MiB':>12}"
            f"\n  {'classic, from remote':<28}{m('remote_mib_s'):>8.1f}{m('remote_cpu'):>12.2f}"
            f"\n  {'diskless':<28}{m('diskless_mib_s'):>8.1f}{m('diskless_cpu'):>12.2f}"
            f"\n  remote / diskless: {m('remote_mib_s') / m('diskless_mib_s'):.2f}x MiB/s, "
            f"{m('remote_cpu') / m('diskless_cpu'):.2f}x CPU per MiB"
        )
        if not all(r["remote_complete"] for r in rows):
            print("  (a remote read was cut short by the budget: its rate is what was read)")
    finally:
        cluster.down()
        cluster.remove_data()
    return 0


if __name__ == "__main__":
    sys.exit(main())
