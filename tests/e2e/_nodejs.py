"""Stock Node.js clients driven from the tests through small scripts.

scripts/test installs Node.js and the clients pinned in tests/e2e/nodejs/package-lock.json;
a missing install fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

NODE_DIR = Path(__file__).with_name("nodejs")


def _node() -> str:
    node = shutil.which("node")
    assert node, "node is missing: scripts/test installs it (Debian's nodejs)"
    assert (NODE_DIR / "node_modules" / "@platformatic" / "kafka").is_dir(), (
        "the Node.js clients are missing: scripts/test runs `npm ci` in tests/e2e/nodejs"
    )
    return node


def _run(script: str, *args: str, timeout: float = 120) -> dict[str, object]:
    """Runs ``script`` (in tests/e2e/nodejs) with ``args``; the last JSON object it printed."""
    done = subprocess.run(
        [_node(), str(NODE_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=NODE_DIR,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"node printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def platformatic_produce(bootstrap: str, topic: str, count: int, prefix: str) -> dict[str, object]:
    """An idempotent @platformatic/kafka producer sends ``count`` records keyed
    ``<prefix>-<i>`` to partition 0, one request each; returns what the script printed."""
    return _run("platformatic_produce.mjs", bootstrap, topic, str(count), prefix)


def kafkajs_transactions(bootstrap: str, topic: str, count: int) -> dict[str, object]:
    """kafkajs: one committed and one aborted transaction of ``count`` records, then what a
    kafkajs consumer (read_committed, its default) reads; see kafkajs_transactions.mjs."""
    return _run("kafkajs_transactions.mjs", bootstrap, topic, str(count))


def platformatic_quotas(bootstrap: str, action: str, payload: object) -> dict[str, object]:
    """@platformatic/kafka's admin client: ``alter`` (AlterClientQuotas entries) or
    ``describe`` (DescribeClientQuotas components); what platformatic_quotas.mjs printed."""
    return _run("platformatic_quotas.mjs", bootstrap, action, json.dumps(payload), timeout=60)
