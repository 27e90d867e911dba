"""Three `sluice controller` processes: the Raft quorum behind the cluster metadata.

Kill the active controller with SIGKILL → another is active within 2 s with the default
timeouts, nothing committed is lost, and the killed one catches up when it returns.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.cluster import ControllerProcess, LocalCluster
from tests.fixtures.cluster import running_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, "quorum", brokers=0, controllers=3) as c:
        yield c


def call(c: ControllerProcess, secret: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        c.url + path,
        data=data,
        headers={"X-Sluice-Secret": secret},
        method="POST" if data else "GET",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def wait_for_active(
    quorum: LocalCluster, timeout: float, exclude: int | None = None
) -> tuple[ControllerProcess, float]:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        active = quorum.active_controller()
        if active is not None and active.node_id != exclude:
            return active, time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"no active controller within {timeout} s")


def topics_in_log(c: ControllerProcess, secret: str) -> set[str]:
    import base64

    from controller.image import MetadataImage
    from controller.records import decode_batch

    status, body = call(c, secret, "/v1/metadata?after=0")
    assert status == 200
    image = MetadataImage()
    if body["snapshot"]:
        image.apply_batch(decode_batch(base64.b64decode(body["snapshot"])))
    for entry in body["entries"]:
        image.apply_batch(decode_batch(base64.b64decode(entry["data"])))
    return {t.name for t in image.topics.values()}


def test_leader_killed_new_leader_within_two_seconds_nothing_lost(quorum: LocalCluster) -> None:
    secret = quorum.secret
    leader, _ = wait_for_active(quorum, 10)
    # Committed metadata: three brokers in three racks and a topic placed on them.
    for node in (1, 2, 3):
        status, body = call(
            leader,
            secret,
            "/v1/brokers/register",
            {
                "node_id": node,
                "incarnation_id": str(uuid.uuid4()),
                "host": "h",
                "port": 9000 + node,
                "rack": f"az-{node}",
            },
        )
        assert (status, body["error_code"]) == (200, 0)
        epoch = body["broker_epoch"]
        status, body = call(
            leader, secret, "/v1/brokers/heartbeat", {"node_id": node, "broker_epoch": epoch}
        )
        assert (status, body["error_code"], body["is_fenced"]) == (200, 0, False)
    status, body = call(
        leader, secret, "/v1/topics/create", {"topics": [{"name": "orders", "num_partitions": 3}]}
    )
    assert status == 200 and body["results"][0]["error_code"] == 0
    assert body["results"][0]["replication_factor"] == 3
    # A follower refuses writes and says who leads.
    follower = next(c for c in quorum.controllers if c.node_id != leader.node_id)
    status, body = call(follower, secret, "/v1/topics/create", {"topics": [{"name": "x"}]})
    assert (status, body["leader"]) == (421, leader.node_id)

    leader.kill()
    new_leader, took = wait_for_active(quorum, 5, exclude=leader.node_id)
    print(f"controller failover took {took:.2f} s")
    assert took < 2.0, f"new controller after {took:.2f} s"
    # The new leader applies what was committed before it answers writes (read index); its
    # metadata endpoint may lag that by a moment, never lose it.
    deadline = time.monotonic() + 10
    while "orders" not in topics_in_log(new_leader, secret):
        assert time.monotonic() < deadline, "the committed topic is missing on the new leader"
        time.sleep(0.05)
    status, body = call(
        new_leader, secret, "/v1/topics/create", {"topics": [{"name": "after-failover"}]}
    )
    assert status == 200 and body["results"][0]["error_code"] == 0
    committed = new_leader.status()["commit_index"]

    leader.start()
    deadline = time.monotonic() + 10
    while leader.status()["applied_index"] < committed:
        assert time.monotonic() < deadline, "the restarted controller did not catch up"
        time.sleep(0.05)
    assert topics_in_log(leader, secret) >= {"orders", "after-failover"}


def test_wrong_secret_is_refused(quorum: LocalCluster) -> None:
    leader, _ = wait_for_active(quorum, 10)
    status, _body = call(leader, "wrong", "/v1/topics/create", {"topics": [{"name": "x"}]})
    assert status == 401
