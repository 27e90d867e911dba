"""The controller process in one event loop: a single voter, its HTTP API and background tasks."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import pytest
from kio.schema.errors import ErrorCode

from controller.records import Partition, Topic, encode_batch
from controller.service import SECRET_HEADER, ControllerService
from tests.fixtures.controller_settings import single_voter


async def start(tmp_path: Path, expand: bool) -> ControllerService:
    service = ControllerService(
        single_voter(
            tmp_path, secret="s", expand_legacy_topics=expand, raft_options={"fsync": False}
        )
    )
    await service.start()
    await service.wait_active()
    return service


async def post(service: ControllerService, path: str, body: dict) -> dict:
    url = f"http://127.0.0.1:{service.http_port}{path}"
    async with (
        aiohttp.ClientSession(headers={SECRET_HEADER: "s"}) as session,
        session.post(url, json=body) as response,
    ):
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def three_racks_and_a_legacy_topic(service: ControllerService) -> uuid.UUID:
    for node in (1, 2, 3):
        registered = await post(
            service,
            "/v1/brokers/register",
            {"node_id": node, "incarnation_id": str(uuid.uuid4()), "host": "h", "port": node,
             "rack": f"az-{node}"},
        )  # fmt: skip
        beat = {"node_id": node, "broker_epoch": registered["broker_epoch"]}
        assert (await post(service, "/v1/brokers/heartbeat", beat))["is_fenced"] is False
    # A topic from before managed RF: one replica, as legacy diskless topics have.
    topic_id = uuid.uuid4()
    await service.node.propose(
        encode_batch([Topic("legacy", topic_id), Partition(topic_id, 0, (2,), (2,), 2)])
    )
    return topic_id


@pytest.mark.parametrize("expand", [False, True])
async def test_legacy_rf1_topics_expand_only_when_enabled(tmp_path: Path, expand: bool) -> None:
    service = await start(tmp_path, expand)
    try:
        topic_id = await three_racks_and_a_legacy_topic(service)
        await asyncio.sleep(1.0)  # several ticks
        partition = service.state.image.topic_by_id(topic_id).partitions[0]
        if expand:
            assert len(partition.replicas) == 3 and partition.replicas[0] == 2
            assert partition.leader == 2  # clients keep their leader
        else:
            assert partition.replicas == (2,)
    finally:
        await service.stop()


async def test_metrics_show_the_managed_replication_factor(tmp_path: Path) -> None:
    service = await start(tmp_path, expand=False)
    try:
        await three_racks_and_a_legacy_topic(service)
        created = await post(service, "/v1/topics/create", {"topics": [{"name": "orders"}]})
        assert created["results"][0]["replication_factor"] == 3
        url = f"http://127.0.0.1:{service.http_port}/metrics"
        async with aiohttp.ClientSession() as session:
            # Topic names are the cluster's business: no secret, no metrics.
            async with session.get(url) as response:
                assert response.status == 401
            bearer = {"Authorization": f"Bearer {service.settings.secret}"}
            async with session.get(url, headers=bearer) as response:
                text = await response.text()
            async with session.get(url.replace("/metrics", "/healthz")) as response:
                assert response.status == 200
        # Seed 000's metrics by their Prometheus names and meanings (diskless topics only).
        assert 'kafka_controller_diskless_effective_rf{topic="orders"} 3.0' in text
        assert 'kafka_controller_diskless_effective_rf{topic="legacy"} 1.0' in text
        assert 'kafka_controller_diskless_rack_aware{partition="0",topic="orders"} 1.0' in text
        assert "kafka_controller_diskless_rf1_topics_total 1.0" in text
        assert "kafka_controller_kafkacontroller_offlinepartitionscount 0.0" in text
        assert "sluice_controller_under_replicated_partitions 0.0" in text
        assert "sluice_controller_active 1.0" in text
        assert "kafka_controller_kafkacontroller_activecontrollercount 1.0" in text
        image = service.state.image
        assert "kafka_controller_kafkacontroller_globaltopiccount 2.0" in text  # legacy, orders
        partitions = sum(len(t.partitions) for t in image.topics.values())
        assert f"kafka_controller_kafkacontroller_globalpartitioncount {partitions}.0" in text
        # One meaning per name: the old spellings are gone.
        assert "sluice_controller_diskless_effective_rf" not in text
        assert "sluice_controller_partition_rack_aware" not in text
    finally:
        await service.stop()


async def test_classic_topic_and_alter_partition_through_the_http_api(tmp_path: Path) -> None:
    from broker.metadata.controller_client import ControllerClient
    from controller.requests import IsrChange

    service = await start(tmp_path, expand=False)
    client = ControllerClient([f"127.0.0.1:{service.http_port}"], "s")
    await client.start()
    try:
        await three_racks_and_a_legacy_topic(service)
        epochs = {n: b.broker_epoch for n, b in service.state.image.brokers.items()}
        created = await post(
            service,
            "/v1/topics/create",
            {"topics": [{"name": "orders", "replication_factor": 3,
                         "configs": {"diskless.enable": "false"}}]},
        )  # fmt: skip
        result = created["results"][0]
        assert result["error_code"] == 0 and result["replication_factor"] == 3
        topic = service.state.image.topic("orders")
        assert topic is not None and not topic.diskless
        p = topic.partitions[0]
        follower = next(r for r in p.replicas if r != p.leader)
        shrunk = tuple(r for r in p.replicas if r != follower)
        change = IsrChange(topic.topic_id, 0, p.leader_epoch, p.partition_epoch, shrunk)
        answer, applied = await client.alter_partition(p.leader, epochs[p.leader], [change])
        assert answer.error_code == 0 and answer.partitions[0].error_code == 0
        assert tuple(answer.partitions[0].isr) == shrunk and applied > 0
        assert service.state.image.topic("orders").partitions[0].isr == shrunk
        # The same (now stale) partition epoch again: refused, nothing changes.
        stale, _ = await client.alter_partition(p.leader, epochs[p.leader], [change])
        assert stale.partitions[0].error_code == ErrorCode.invalid_update_version
        # A stale broker epoch refuses the whole request.
        fenced, _ = await client.alter_partition(p.leader, -5, [change])
        assert fenced.error_code == ErrorCode.stale_broker_epoch
    finally:
        await client.close()
        await service.stop()


async def test_config_alterations_a_client_can_send_never_answer_5xx(tmp_path: Path) -> None:
    service = await start(tmp_path, expand=False)
    url = f"http://127.0.0.1:{service.http_port}/v1/topics/configs"
    try:
        await three_racks_and_a_legacy_topic(service)
        configs = {"diskless.enable": "false", "unclean.leader.election.enable": "true"}
        created = await post(
            service,
            "/v1/topics/create",
            {"topics": [{"name": "orders", "replication_factor": 3, "configs": configs}]},
        )
        assert created["results"][0]["error_code"] == 0
        # What the broker sends for a legacy AlterConfigs that leaves the key out.
        drop = {"name": "orders", "ops": [{"key": "unclean.leader.election.enable", "op": 1}]}
        answer = await post(service, "/v1/topics/configs", {"topics": [drop]})
        assert answer["results"][0]["error_code"] == 0
        assert service.state.image.topic("orders").configs == {"diskless.enable": "false"}  # type: ignore[union-attr]
        # A body the logic cannot decide is refused at once (4xx: not worth retrying),
        # never a 5xx the broker would retry until the client's request times out.
        async with aiohttp.ClientSession(headers={SECRET_HEADER: "s"}) as session:
            for body in ({"topics": [{"name": "orders"}]}, {"nope": 1}):
                async with session.post(url, json=body) as response:
                    assert response.status == 422, await response.text()
            async with session.post(url, data=b"{not json") as response:
                assert response.status == 400
    finally:
        await service.stop()
