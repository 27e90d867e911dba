"""TopicRegistry.ensure: re-reading the catalog for a topic this broker does not know."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Run in a child process: the bug this pins made the event loop spin without ever yielding,
# which no in-process timeout can interrupt (and which would starve the rest of the session).
_SCENARIO = textwrap.dedent(
    """
    import asyncio, itertools
    import broker.metadata.topics as topics
    from storage.catalog import Topic

    ticks = itertools.count(1)
    topics.time.monotonic = lambda: float(next(ticks))  # every reading is later than the last

    class Catalog:
        reads = 0

        async def list_topics(self):
            # Like ControllerCatalog.list_topics: answers without ever awaiting.
            Catalog.reads += 1
            return [Topic("known", __import__("uuid").uuid4(), 1, {})]

    async def main():
        registry = topics.TopicRegistry(Catalog(), None, None)
        first = asyncio.create_task(registry.ensure([("missing-1", None)]))
        await asyncio.sleep(0)  # first starts a read and waits for it
        # Scheduled behind the read: runs after it finished, before its callbacks did.
        second = asyncio.create_task(registry.ensure([("missing-2", None)]))
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert registry.get("known") is not None
        print("reads", Catalog.reads)

    asyncio.run(main())
    """
)


def test_ensure_after_a_read_finished_in_the_same_loop_iteration_returns() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCENARIO], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("ensure() never returned: the event loop spun") from None
    assert done.returncode == 0, done.stderr
    # The second request arrived after the first read began, so it needs a read of its
    # own; the two requests must not cause more than that.
    assert done.stdout.split() == ["reads", "2"]
