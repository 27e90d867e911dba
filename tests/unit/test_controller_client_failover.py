"""A broker's controller client after a failover: it must find the new active controller
within a round of the quorum, not after a backoff that grew while the election ran (a
broker whose heartbeats arrive after its session expired on the new controller is fenced
with every partition it leads)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from broker.metadata.controller_client import NOT_LEADER, ControllerClient


class FakeController:
    """An HTTP endpoint answering NOT_LEADER (no hint) until it is made active."""

    def __init__(self) -> None:
        self.active = False
        self.hits = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _handle(self, _request: web.Request) -> web.Response:
        self.hits += 1
        if not self.active:
            return web.json_response({"error": "not the active controller"}, status=NOT_LEADER)
        return web.json_response({"error_code": 0, "is_fenced": False, "applied": 1})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/brokers/heartbeat", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _dead_port() -> int:
    """A port nobody listens on (a killed controller: connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def quorum() -> AsyncIterator[tuple[list[str], FakeController, FakeController]]:
    follower, successor = FakeController(), FakeController()
    await follower.start()
    await successor.start()
    # The dead (formerly active) controller first, as in a broker's bootstrap list.
    servers = [f"127.0.0.1:{_dead_port()}", f"127.0.0.1:{follower.port}"]
    servers.append(f"127.0.0.1:{successor.port}")
    yield servers, follower, successor
    await follower.stop()
    await successor.stop()


async def test_a_failed_controller_sends_the_request_on_to_the_next_at_once(
    quorum: tuple[list[str], FakeController, FakeController],
) -> None:
    servers, follower, successor = quorum
    successor.active = True
    client = ControllerClient(servers)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result, _ = await client.heartbeat(1, 1)
        # The dead one refused, the follower said not active, the successor answered: one
        # round, no backoff in between.
        assert loop.time() - started < 0.04
        assert result.is_fenced is False
        assert (follower.hits, successor.hits) == (1, 1)
        # And the successor is asked first from then on.
        await client.heartbeat(1, 1)
        assert (follower.hits, successor.hits) == (1, 2)
    finally:
        await client.close()


async def test_a_heartbeat_reaches_a_controller_elected_late_within_its_backoff_cap(
    quorum: tuple[list[str], FakeController, FakeController],
) -> None:
    servers, _follower, successor = quorum
    client = ControllerClient(servers)
    try:
        loop = asyncio.get_running_loop()
        beat = asyncio.ensure_future(client.heartbeat(1, 1, max_backoff=0.2, deadline=10))
        # An election that takes 1.5 s: without the cap, the backoff would have grown to
        # 0.8-1 s by then.
        await asyncio.sleep(1.5)
        successor.active = True
        elected = loop.time()
        result, _ = await beat
        assert result.is_fenced is False
        assert loop.time() - elected < 0.35
    finally:
        await client.close()
