"""KIP-950 disablement through failures: the topic is DISABLING in the metadata log while
the partition's leader cannot act (stopped), the active controller is SIGKILLed, then the
leader broker itself; the next controller sends DisableRemoteTopic to the next leader,
which does the job (delete: the remote data goes, the log starts at the local log), and
the topic becomes DISABLED.

Three controllers (a Raft quorum) and three brokers, stock clients for the data; and one
broker at the default remote.log.manager.task.interval.ms, whose leader acts on the
controller's request at once, not at its next tiering run.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from controller.image import MetadataImage
from controller.records import decode_batch
from controller.tiering_state import TIERING_DISABLED, TIERING_DISABLING
from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import confluent_consume, wait_until
from .test_tiered import (
    TIERED,
    TIERED_BROKERS,
    _try_alter,
    alter,
    create,
    describe,
    local_segments,
    logs_about,
    produce,
    values,
    wait_tiered,
    watermarks,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(
        tmp_path_factory,
        "tiered-quorum",
        brokers=3,
        broker_options=TIERED_BROKERS,
        controllers=3,
    ) as c:
        yield c


def controller_api(cluster: LocalCluster, path: str, body: object) -> dict:  # type: ignore[type-arg]
    active = cluster.active_controller()
    assert active is not None
    request = urllib.request.Request(
        active.url + path,
        data=json.dumps(body).encode(),
        headers={"X-Sluice-Secret": cluster.secret, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)  # type: ignore[no-any-return]


def tiering_state(cluster: LocalCluster, topic: str) -> str | None:
    """The topic's tiering state in the active controller's metadata log."""
    active = cluster.active_controller()
    if active is None:
        return None
    request = urllib.request.Request(
        active.url + "/v1/metadata?after=0", headers={"X-Sluice-Secret": cluster.secret}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = json.load(response)
    except OSError:
        return None  # between two active controllers
    image = MetadataImage()
    if body["snapshot"]:
        image.apply_batch(decode_batch(base64.b64decode(body["snapshot"])))
    for entry in body["entries"]:
        image.apply_batch(decode_batch(base64.b64decode(entry["data"])))
    t = image.topic(topic)
    return None if t is None or t.tiering is None else t.tiering.state


def test_disabling_survives_a_controller_kill_and_a_leader_kill(
    cluster: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, topic)
    produce(cluster.bootstrap, topic, 0, 3000)
    leader, replicas, _ = describe(admin, topic)
    for node in replicas:  # whichever leads next has deleted its tiered segments too
        wait_tiered(cluster, topic, node)
    others = [r for r in replicas if r != leader]
    # Every replica in the ISR, so that one of the others may lead once the leader is gone.
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "a full ISR", 15)
    stopped = cluster.broker(leader)
    assert stopped.proc is not None
    os.kill(stopped.proc.pid, signal.SIGSTOP)  # the leader cannot act on the disablement
    try:
        # Straight to the controllers' API: a Kafka admin client may pick the stopped
        # broker, which Metadata names as the controller until its session expires.
        disable = {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"}
        ops = [{"key": k, "op": 0, "value": v} for k, v in disable.items()]  # 0: SET
        answer = controller_api(
            cluster, "/v1/topics/configs", {"topics": [{"name": topic, "ops": ops}]}
        )
        assert answer["results"][0]["error_code"] == 0, answer
        assert tiering_state(cluster, topic) == TIERING_DISABLING
        controller = cluster.active_controller()
        assert controller is not None
        controller.stop(signal.SIGKILL)
        wait_until(
            lambda: cluster.active_controller() not in (None, controller), "a new controller", 20
        )
        stopped.stop(signal.SIGKILL)  # the leader dies before it did anything
    finally:
        if stopped.alive() and stopped.proc is not None:
            os.kill(stopped.proc.pid, signal.SIGCONT)
    # A new leader (elected once the dead one's session expires) deletes the remote
    # segments and reports to the new controller.
    try:
        wait_until(lambda: tiering_state(cluster, topic) == TIERING_DISABLED, "DISABLED", 90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs_about(cluster, topic)}") from None
    via_other = AdminClient({"bootstrap.servers": cluster.broker(others[0]).bootstrap})
    new_leader = describe(via_other, topic)[0]
    assert new_leader in others
    bootstrap = cluster.broker(others[0]).bootstrap
    low, high = watermarks(bootstrap, topic)
    assert high == 3000 and low == local_segments(cluster, new_leader, topic)[0] > 0
    got = confluent_consume(bootstrap, topic, expected=high - low)
    assert values(got) == list(range(low, high))
    controller.start()
    stopped.start()
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "the old leader back in the ISR", 30)


def test_the_leader_disables_at_the_controllers_request_not_at_its_next_run(
    tmp_path_factory: pytest.TempPathFactory, topic: str
) -> None:
    # remote.log.manager.task.interval.ms at its default (30 s): the leader's next tiering
    # run is far off; the controller's DisableRemoteTopic (in a heartbeat answer) is not.
    with fast_cluster(tmp_path_factory, "tiered-disable-now", brokers=1, controllers=1) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        config = {**TIERED, "min.insync.replicas": "1"}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
        wait_until(lambda: describe(admin, topic)[0] == 1, "a leader", 15)
        produce(c.bootstrap, topic, 0, 100)
        alter(admin, topic, remote_storage_enable="false")
        # Re-enabling is accepted once DISABLED: the leader acknowledged the request.
        wait_until(lambda: _try_alter(admin, topic, remote_storage_enable="true"), "DISABLED", 10)
        got = confluent_consume(c.bootstrap, topic, expected=100)
        assert values(got) == list(range(100))
