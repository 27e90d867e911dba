"""One broker under test in a scripted session: the calls it answered, recorded by label."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .compare import code, plain
from .proxy import RecordingProxy
from .wire import API_KEYS, Connection, request_for

# Transient answers a broker gives while an internal topic or coordinator is being set up
# (Kafka creates __consumer_offsets and __transaction_state on first use): the sessions wait
# them out instead of recording them, as a client's retries would.
COORDINATOR_WARMING = {14, 15, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, CONCURRENT_TXNS
# What a client retries InitProducerId on as well: Kafka answers NOT_COORDINATOR for a short
# while after FindCoordinator created its transaction state topic (the partition is not
# loaded into the coordinator yet); a client then finds the coordinator again and retries.
TXN_COORDINATOR_WARMING = COORDINATOR_WARMING | {16}
SETTLE_TIMEOUT_S = 30.0


class Side:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        versions: Mapping[str, int],
        login: tuple[str, str] | None = None,
        proxy: RecordingProxy | None = None,
    ) -> None:
        self.name = name
        # host:port is the proxy's when there is one: the recorded answers are then what it
        # saw on the wire and forwarded (proxy.py), not this client's own decoding.
        self.proxy = proxy
        self.address = (host, port)
        self.login = login
        self.versions = versions
        self.steps: dict[str, Any] = {}
        self.conn = self._connect()
        self._others: list[Side] = []

    def _connect(self) -> Connection:
        conn = Connection(*self.address)
        if self.login is not None:
            conn.login(*self.login)
        return conn

    def as_user(self, user: str, password: str) -> Side:
        """The same broker through a connection of ``user``'s (SASL/PLAIN), recording into
        the same steps (the secure sessions: an administrator sets up, a user is refused)."""
        other = Side(self.name, *self.address, self.versions, (user, password), self.proxy)
        other.steps = self.steps
        self._others.append(other)
        return other

    def close(self) -> None:
        self.conn.close()
        for other in self._others:
            other.close()

    def version(self, api: str) -> int:
        return self.versions[api]

    def request(self, api: str, body: Mapping[str, Any], version: int | None = None) -> Any:
        """Send without recording (setup and polling): the plain response."""
        v = self.version(api) if version is None else version
        return plain(self.conn.send(request_for(api, v, body)))

    def call(
        self,
        label: str,
        api: str,
        body: Mapping[str, Any],
        *,
        version: int | None = None,
        expect_response: bool = True,
        until: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Send and record the response under ``label``. With ``until``, resend (bounded)
        until the response satisfies it, and record the last one."""
        assert label not in self.steps, f"step label {label!r} used twice"
        v = self.version(api) if version is None else version
        if not expect_response:
            self.conn.send(request_for(api, v, body), expect_response=False)
            self.steps[label] = "(no response expected)"
            return None
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            try:
                response = plain(self.conn.send(request_for(api, v, body)))
            except OSError as exc:
                # No answer (closed, or silent until the timeout) is an answer too: record it
                # and go on with a new connection, as a client would.
                self.steps[label] = f"(no answer: {type(exc).__name__})"
                self.conn.close()
                self.conn = self._connect()
                return None
            if until is None or until(response) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.steps[label] = {"version": v, "response": self._as_recorded(response)}
        return response

    def _as_recorded(self, response: Any) -> Any:
        """The answer the proxy recorded for the request just sent (the client's own decoding
        without a proxy)."""
        if self.proxy is None:
            return response
        port = int(self.conn.sock.getsockname()[1])
        recorded = self.proxy.response(port, self.conn.correlation_id)
        if recorded is None:
            return f"(not seen by the recording proxy; the client read {response!r})"
        return recorded.response

    # --- setup helpers (not recorded) ---

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None
    ) -> None:
        resp = self.request(
            "create_topics",
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        (topic,) = resp["topics"]
        assert code(topic["error_code"]) == 0, f"{self.name}: create {name}: {topic}"
        self.wait_leaders(name, partitions)

    def metadata(self, names: list[str]) -> Any:
        return self.request(
            "metadata",
            {
                "topics": [{"name": n} for n in names],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )

    def wait_leaders(self, name: str, partitions: int) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            (topic,) = self.metadata([name])["topics"]
            parts = topic["partitions"]
            if (
                code(topic["error_code"]) == 0
                and len(parts) == partitions
                and all(code(p["error_code"]) == 0 and p["leader_id"] >= 0 for p in parts)
                and self._partitions_serve(name, partitions)
            ):
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {name} has no leaders after {SETTLE_TIMEOUT_S}s")

    def _partitions_serve(self, name: str, partitions: int) -> bool:
        """Kafka shows a leader in Metadata a moment before the partition takes requests
        (NOT_LEADER_OR_FOLLOWER meanwhile): ready once ListOffsets answers for every one."""
        resp = self.request(
            "list_offsets",
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": p, "timestamp": -1} for p in range(partitions)
                        ],
                    }
                ],
            },
        )
        return all(code(p["error_code"]) == 0 for p in resp["topics"][0]["partitions"])

    def node_id(self) -> int:
        (broker,) = self.metadata([])["brokers"]
        return int(broker["node_id"])

    def topic_id(self, name: str) -> str:
        (topic,) = self.metadata([name])["topics"]
        return str(topic["topic_id"])

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> Any:
        resp = self.request(
            "produce",
            {
                "transactional_id": None,
                "acks": acks,
                "timeout": 10_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        part = resp["responses"][0]["partition_responses"][0]
        assert code(part["error_code"]) == 0, f"{self.name}: produce {topic}/{partition}: {part}"
        return part


def common_versions(*tables: Mapping[int, tuple[int, int]]) -> dict[str, int]:
    """For each API: the highest version every broker and kio support (absent if none)."""
    from .wire import kio_versions

    out: dict[str, int] = {}
    for api, key in API_KEYS.items():
        if not all(key in t for t in tables):
            continue
        low = max(t[key][0] for t in tables)
        high = min(t[key][1] for t in tables)
        kio = kio_versions(key)
        high = min(high, kio.stop - 1)
        if high >= max(low, kio.start):
            out[api] = high
    return out
