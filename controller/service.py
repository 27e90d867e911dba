"""The controller process: a Raft node over the metadata log, the controller logic, and the HTTP
API brokers talk to (documented in controller/wire.py).

Writes run one at a time under a lock on the active controller: decide from the image, propose
the records as one Raft entry, and answer once that entry is committed and applied here — so
each decision sees everything decided before it (controller/logic.py, rule 1). After winning an
election the controller first waits for a read-index barrier (everything committed before its
term is applied) and gives every broker a fresh session (rule 2).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from common.acl import AclBinding, AclFilter
from common.background import cancel_and_wait
from common.http_server import serve
from common.topic_config_keys import KEYS
from common.topic_config_validation import LIST_KEYS, validate
from controller import acl_admin, broker_config_admin, feature_admin
from controller import metrics as image_metrics
from controller.access import secret_problem
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.migration import SealReport, migration_metrics
from controller.raft.messages import CommitUnknown, NotLeader
from controller.raft.node import NodeConfig, NodeStopped, RaftNode
from controller.records import encode_batch
from controller.requests import (
    AlterTopicConfigs,
    BrokerRegistrationRequest,
    DisableRemoteAck,
    HeartbeatResult,
    IsrChange,
    LeaderElection,
    NewPartitions,
    NewTopic,
    Outcome,
    Reassignment,
    ScramDeletion,
    ScramUpsertion,
)
from controller.state import MetadataStateMachine
from controller.wire import from_json, to_json

log = logging.getLogger(__name__)

TICK_S = 0.2
LEGACY_PER_TICK = 5
PROPOSE_TIMEOUT_S = 10.0
SECRET_HEADER = "X-Sluice-Secret"
# Signs Raft messages only under controller.insecure.allow.unauthenticated=true, where the
# operator said the network is trusted: anyone can forge it (controller/access.py).
INSECURE_RAFT_KEY = b"sluice-insecure-unauthenticated"


@dataclass(frozen=True)
class ControllerSettings:
    node_id: int
    voters: dict[int, tuple[str, int]]  # Raft addresses of all voters (self included)
    host: str
    http_port: int
    data_dir: Path
    secret: str = ""
    # controller/access.py: without a secret the service refuses to start unless this says
    # the network is trusted (development only).
    allow_unauthenticated: bool = False
    session_timeout_ms: int = 9_000
    default_partitions: int = 1
    cluster_id: str | None = None
    # Seed 000's background task: expand legacy RF=1 diskless topics to one replica per rack.
    expand_legacy_topics: bool = False
    # The kind of a topic created without diskless.enable (log.diskless.enable), and the RF
    # of a classic topic created with -1 (default.replication.factor).
    default_diskless: bool = True
    default_replication_factor: int = 1
    # Kafka's automatic preferred-leader rebalance (controller.leader_election).
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    raft_options: dict[str, Any] = field(default_factory=dict)
    # TLS for the HTTP API brokers use (PEM files; Kafka's names). Without a certificate
    # the API is plain HTTP, as before. ssl.client.auth=required: brokers must present a
    # certificate signed by ssl.ca.location (mTLS), on top of the shared secret.
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: str = ""
    ssl_ca_location: str = ""
    ssl_client_auth: str = "none"

    def __repr__(self) -> str:
        # Never the secret or the key password (a repr ends up in logs and tracebacks).
        return (
            f"ControllerSettings(node_id={self.node_id}, host={self.host!r}, "
            f"http_port={self.http_port}, data_dir={str(self.data_dir)!r}, "
            f"tls={bool(self.ssl_certificate_location)})"
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.ssl_certificate_location:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(
            self.ssl_certificate_location,
            self.ssl_key_location or None,
            password=self.ssl_key_password or None,
        )
        if self.ssl_ca_location:
            context.load_verify_locations(cafile=self.ssl_ca_location)
        context.verify_mode = {
            "required": ssl.CERT_REQUIRED,
            "requested": ssl.CERT_OPTIONAL,
        }.get(self.ssl_client_auth, ssl.CERT_NONE)
        return context

    def raft_ssl_contexts(self) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
        """TLS for the Raft link when the controller has a certificate: (listener, client).

        The link carries the metadata log (SCRAM salts and stored keys among it), so it is
        encrypted like the API. A connecting voter checks the listener's certificate against
        ``ssl.ca.location`` and the host named in ``controller.quorum.voters``; the listener
        authenticates voters by the shared secret's handshake (controller/raft/transport.py),
        not by a client certificate (voters hold a server certificate)."""
        if not self.ssl_certificate_location:
            return None, None
        if not self.ssl_ca_location:
            raise ValueError(
                "ssl.ca.location is required with ssl.certificate.location: voters check "
                "each other's certificates on the Raft link"
            )
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1_2
        server.load_cert_chain(
            self.ssl_certificate_location,
            self.ssl_key_location or None,
            password=self.ssl_key_password or None,
        )
        client = ssl.create_default_context(cafile=self.ssl_ca_location)
        client.minimum_version = ssl.TLSVersion.TLSv1_2
        return server, client


class NotActive(Exception):
    pass


class ControllerService:
    def __init__(self, settings: ControllerSettings) -> None:
        if not settings.secret and not settings.allow_unauthenticated:
            # The last line of defence (load_settings says why in words): an open API and
            # Raft messages anyone could sign.
            raise ValueError(secret_problem("", False))
        self.settings = settings
        self.state = MetadataStateMachine()
        self.node = RaftNode(
            NodeConfig(
                node_id=settings.node_id,
                voters=settings.voters,
                data_dir=settings.data_dir / "raft",
                secret=settings.secret.encode() or INSECURE_RAFT_KEY,
                **settings.raft_options,
            ),
            self.state,
            ssl_contexts=settings.raft_ssl_contexts(),
        )
        # Topic configs are validated by the rules the broker applies too (common/).
        config = ControllerConfig(
            session_timeout_ms=settings.session_timeout_ms,
            default_partitions=settings.default_partitions,
            cluster_id=settings.cluster_id,
            validate_configs=validate,
            list_config_keys=LIST_KEYS,
            config_defaults={name: KEYS[name].default for name in LIST_KEYS},
            default_diskless=settings.default_diskless,
            default_replication_factor=settings.default_replication_factor,
            auto_leader_rebalance=settings.auto_leader_rebalance,
            leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_ms,
            leader_imbalance_per_broker_percentage=settings.leader_imbalance_per_broker_percentage,
            # Brokers serve classic topics (broker/logs/classic): diskless.enable=false is allowed.
            classic_topics=True,
        )
        self.logic = ControllerLogic(config)
        self._lock = asyncio.Lock()
        self._active_term = -1  # the term in which this controller became active
        # The first check waits one interval: brokers of a starting cluster are still coming.
        self._next_rebalance_ms = _now_ms() + config.leader_imbalance_check_interval_ms
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self.http_port = settings.http_port
        self.registry = CollectorRegistry()
        self._init_metrics()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self.node.start()
        app = web.Application(middlewares=[self._auth])
        routes = [
            web.get("/v1/metadata", self._metadata),
            web.get("/v1/status", self._status),
            web.get("/metrics", self._metrics),
            web.get("/healthz", self._healthz),
            web.get("/readyz", self._readyz),
            web.post("/v1/brokers/register", self._register),
            web.post("/v1/brokers/heartbeat", self._heartbeat),
            web.post("/v1/brokers/unregister", self._unregister),
            web.post("/v1/topics/create", self._create_topics),
            web.post("/v1/topics/delete", self._delete_topics),
            web.post("/v1/topics/partitions", self._create_partitions),
            web.post("/v1/topics/configs", self._alter_configs),
            web.post("/v1/reassignments", self._alter_reassignments),
            web.post("/v1/leaders/elect", self._elect_leaders),
            web.get("/v1/reassignments", self._list_reassignments),
            web.post("/v1/acls/create", self._create_acls),
            web.post("/v1/acls/delete", self._delete_acls),
            web.post("/v1/quotas/alter", self._alter_quotas),
            web.post("/v1/broker-configs/alter", self._alter_broker_configs),
            web.post("/v1/partitions/isr", self._alter_partition),
            web.post("/v1/migrations/sealed", self._partition_sealed),
            web.post("/v1/scram", self._alter_scram),
            web.post("/v1/features/update", self._update_features),
        ]
        app.add_routes(routes)
        # Long polls are woken at stop() and the runner's shutdown wait is bounded.
        self._runner, self.http_port = await serve(
            app, self.settings.host, self.settings.http_port, self.settings.ssl_context()
        )
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        log.info(
            "sluice controller %d: raft on %s, api on %s://%s:%d",
            self.settings.node_id,
            self.node.address,
            "https" if self.settings.ssl_certificate_location else "http",
            self.settings.host,
            self.http_port,
        )

    async def stop(self) -> None:
        # Answer waiting long polls now: the HTTP server's shutdown waits for its handlers.
        self.state.closing = True
        self.state.wake()
        await cancel_and_wait(self._tasks)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.node.stop()

    # ---------------------------------------------------------------- writes

    async def wait_active(self, timeout: float = 30.0) -> None:
        """Wait until this controller is the active one (a single voter: at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                async with self._lock:
                    await self._ensure_active()
                return
            except NotActive:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def fence_all(self) -> None:
        """Fence every registered broker now, as if all their sessions had expired. For the
        embedded controller, which starts with its only broker: any registration in the
        log belongs to an earlier, dead process, whose session need not be waited out."""
        await self.wait_active()
        expired = _now_ms() + self.settings.session_timeout_ms + 1
        await self._fence_expired(lambda: expired)

    async def _fence_expired(self, now_ms: Callable[[], int]) -> None:
        """Fence the brokers whose session expired, one record batch each (logic.tick),
        until none is left: each fence is applied before the next one's elections."""

        def decide() -> Outcome[bool]:
            records = self.logic.tick(self.state.image, now_ms())
            return Outcome(records, bool(records))

        for _ in range(len(self.state.image.brokers) + 1):
            fenced, _ = await self._write(decide)
            if not fenced:
                return

    async def _ensure_active(self) -> None:
        """Raise NotActive unless this controller leads and has caught up with its term."""
        if not self.node.is_leader:
            raise NotActive()
        term = self.node.term
        if self._active_term != term:
            try:
                index = await self.node.read_index(timeout=PROPOSE_TIMEOUT_S)
                await self.node.wait_applied(index, timeout=PROPOSE_TIMEOUT_S)
            except (NotLeader, TimeoutError, NodeStopped) as exc:
                raise NotActive() from exc
            self.logic.become_active(self.state.image, _now_ms())
            self._active_term = term
            log.info("controller %d is active in term %d", self.settings.node_id, term)

    async def _write(self, decide: Callable[[], Outcome[Any]]) -> tuple[Any, int]:
        async with self._lock:
            await self._ensure_active()
            outcome = decide()
            index = self.state.applied
            if outcome.records:
                try:
                    index = await self.node.propose(
                        encode_batch(outcome.records), timeout=PROPOSE_TIMEOUT_S
                    )
                except (NotLeader, NodeStopped) as exc:
                    raise NotActive() from exc
            return outcome.response, index

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self._update_metrics()
            if not self.node.is_leader:
                continue
            try:
                await self._fence_expired(_now_ms)
                await self._rebalance_leaders_when_due()
                if self.settings.expand_legacy_topics:
                    # A few topics per tick: one entry stays small, and admin requests are
                    # not held up behind a big expansion.
                    await self._write(
                        lambda: Outcome(
                            self.logic.expand_legacy_topics(self.state.image, LEGACY_PER_TICK),
                            None,
                        )
                    )
            except (NotActive, TimeoutError, CommitUnknown):
                pass
            except Exception:
                log.exception("controller tick failed")

    async def _rebalance_leaders_when_due(self) -> None:
        cfg = self.logic.config
        now = _now_ms()
        if not cfg.auto_leader_rebalance or now < self._next_rebalance_ms:
            return
        self._next_rebalance_ms = now + cfg.leader_imbalance_check_interval_ms
        await self._write(
            lambda: Outcome(
                self.logic.rebalance_leaders(
                    self.state.image, cfg.leader_imbalance_per_broker_percentage
                ),
                None,
            )
        )

    # ---------------------------------------------------------------- http plumbing

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        secret = self.settings.secret
        # Health and the Raft status carry nothing about the cluster's contents; /metrics
        # names every topic, so it takes the secret like the API (Prometheus sends it as a
        # bearer token: ``authorization: {credentials_file: ...}``).
        public = request.path in ("/healthz", "/readyz", "/v1/status")
        if secret and not public:
            given = request.headers.get(SECRET_HEADER)
            if given is None:
                scheme, _, token = request.headers.get("Authorization", "").partition(" ")
                given = token.strip() if scheme.lower() == "bearer" else ""
            if not hmac.compare_digest(given.encode(), secret.encode()):
                return web.json_response({"error": "bad secret"}, status=401)
        try:
            return await handler(request)
        except NotActive:
            return web.json_response(
                {"error": "not_leader", "leader": self.node.leader_id, "leader_url": None},
                status=421,
            )
        except (TimeoutError, CommitUnknown) as exc:
            return web.json_response({"error": f"outcome unknown: {exc!r}"}, status=503)

    async def _answer(self, request: web.Request, decide: Callable[[Any], Outcome[Any]]) -> Any:
        """Decide on a write request and commit its records. A request that cannot be
        decided (a malformed body, or a bug in the logic) is answered 400/422 at once:
        a 5xx would make the broker retry the same request until its timeout, and the
        Kafka client would see REQUEST_TIMED_OUT instead of an error code."""
        try:
            body = await request.json()
        except ValueError as exc:
            return web.json_response({"error": f"malformed JSON body: {exc}"}, status=400)
        failure: Exception | None = None

        def checked() -> Outcome[Any]:
            nonlocal failure
            try:
                return decide(body)
            except Exception as exc:  # nothing is proposed: the image stays as it was
                failure = exc
                return Outcome([], None)

        response, index = await self._write(checked)
        if failure is not None:
            log.error("%s failed on %.200r", request.path, body, exc_info=failure)
            return web.json_response(
                {"error": f"{request.path} could not be processed: {failure!r}"}, status=422
            )
        out = to_json(response)
        if isinstance(out, list):
            out = {"results": out}
        out["applied"] = index
        return web.json_response(out)

    # ---------------------------------------------------------------- endpoints

    async def _metadata(self, request: web.Request) -> web.Response:
        try:
            after = int(request.query.get("after", "0"))
            wait_ms = min(int(request.query.get("wait_ms", "0")), 30_000)
        except ValueError as exc:
            return web.json_response({"error": f"bad query: {exc}"}, status=400)
        if request.query.get("linearizable") == "1":
            # Everything committed before this request, applied here first (read index): a
            # one-shot reader sees every write that was answered, even one this leader has
            # committed but not yet applied, or one of a leader it just replaced.
            if not self.node.is_leader:
                raise NotActive()
            try:
                index = await self.node.read_index(timeout=PROPOSE_TIMEOUT_S)
                await self.node.wait_applied(index, timeout=PROPOSE_TIMEOUT_S)
            except (NotLeader, TimeoutError, NodeStopped) as exc:
                raise NotActive() from exc
        if wait_ms > 0:
            await self.state.wait_past(after, wait_ms / 1000)
        snapshot, entries = self.state.read(after)
        applied = entries[-1][0] if entries else self.state.applied
        return web.json_response(
            {
                "applied": applied,
                "leader": self.node.leader_id,
                "snapshot": to_json(snapshot) if snapshot is not None else None,
                "snapshot_index": self.state.applied if snapshot is not None else None,
                "entries": [{"index": i, "data": to_json(d)} for i, d in entries],
            }
        )

    async def _status(self, _request: web.Request) -> web.Response:
        return web.json_response({**self.node.status(), "http_port": self.http_port})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        if self.node.leader_id is None:
            return web.Response(status=503, text="not ready: no known leader\n")
        return web.Response(text="ready\n")

    async def _register(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: self.logic.register_broker(
                self.state.image, from_json(BrokerRegistrationRequest, b), _now_ms()
            ),
        )

    async def _heartbeat(self, request: web.Request) -> web.Response:
        def beat(b: dict[str, Any]) -> Outcome[HeartbeatResult]:
            image, node_id = self.state.image, int(b["node_id"])
            outcome = self.logic.broker_heartbeat(
                image,
                node_id,
                int(b["broker_epoch"]),
                _now_ms(),
                want_fence=bool(b.get("want_fence", False)),
                want_shutdown=bool(b.get("want_shutdown", False)),
            )
            # KIP-950: the broker's answers to DisableRemoteTopic, and the requests it has
            # still to act on (controller.tiering).
            acks = [from_json(DisableRemoteAck, a) for a in b.get("disabled_remote", ())]
            return self.logic.with_disables(image, node_id, outcome, acks)

        return await self._answer(request, beat)

    async def _unregister(self, request: web.Request) -> web.Response:
        return await self._answer(
            request, lambda b: self.logic.unregister_broker(self.state.image, int(b["node_id"]))
        )

    async def _create_topics(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: self.logic.create_topics(
                self.state.image,
                [from_json(NewTopic, t) for t in b["topics"]],
                bool(b.get("validate_only", False)),
            ),
        )

    async def _delete_topics(self, request: web.Request) -> web.Response:
        # Names under "topics", ids under "ids": a topic may be named like a UUID.
        def keys(b: Any) -> list[str | UUID]:
            return [*b.get("topics", ()), *(UUID(i) for i in b.get("ids", ()))]

        return await self._answer(
            request, lambda b: self.logic.delete_topics(self.state.image, keys(b))
        )

    async def _create_partitions(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: self.logic.create_partitions(
                self.state.image,
                [from_json(NewPartitions, t) for t in b["topics"]],
                bool(b.get("validate_only", False)),
            ),
        )

    async def _alter_configs(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: self.logic.alter_configs(
                self.state.image,
                [from_json(AlterTopicConfigs, t) for t in b["topics"]],
                bool(b.get("validate_only", False)),
            ),
        )

    async def _alter_reassignments(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: self.logic.alter_partition_reassignments(
                self.state.image, [from_json(Reassignment, r) for r in b["reassignments"]]
            ),
        )

    async def _elect_leaders(self, request: web.Request) -> web.Response:
        def elect(body: dict[str, Any]) -> Any:
            parts = body.get("partitions")
            wanted = None if parts is None else [(str(t), int(i)) for t, i in parts]
            election = LeaderElection(int(body["election_type"]), wanted)
            return self.logic.elect_leaders(self.state.image, election)

        return await self._answer(request, elect)

    async def _alter_partition(self, request: web.Request) -> web.Response:
        # AlterPartition from a classic partition's leader (ISR shrink/expand).
        return await self._answer(
            request,
            lambda b: self.logic.alter_partition(
                self.state.image,
                int(b["broker_id"]),
                int(b["broker_epoch"]),
                [from_json(IsrChange, c) for c in b["changes"]],
            ),
        )

    async def _partition_sealed(self, request: web.Request) -> web.Response:
        # A classic partition's leader sealed its log for a migration (controller.migration).
        return await self._answer(
            request,
            lambda b: self.logic.partition_sealed(self.state.image, from_json(SealReport, b)),
        )

    async def _alter_scram(self, request: web.Request) -> web.Response:
        from controller.scram_admin import alter_scram_credentials

        return await self._answer(
            request,
            lambda b: alter_scram_credentials(
                self.state.image,
                [from_json(ScramDeletion, d) for d in b.get("deletions", ())],
                [from_json(ScramUpsertion, u) for u in b.get("upsertions", ())],
            ),
        )

    async def _list_reassignments(self, _request: web.Request) -> web.Response:
        async with self._lock:
            await self._ensure_active()
            ongoing = self.logic.list_partition_reassignments(self.state.image)
        return web.json_response({"results": to_json(ongoing), "applied": self.state.applied})

    # ---------------------------------------------------------------- authorization

    async def _create_acls(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: acl_admin.create_acls(
                self.state.image, [from_json(AclBinding, c) for c in b["creations"]]
            ),
        )

    async def _delete_acls(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: acl_admin.delete_acls(
                self.state.image, [from_json(AclFilter, f) for f in b["filters"]]
            ),
        )

    async def _alter_quotas(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: acl_admin.alter_client_quotas(
                self.state.image,
                [from_json(acl_admin.QuotaAlteration, e) for e in b["entries"]],
                bool(b.get("validate_only", False)),
            ),
        )

    async def _update_features(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: feature_admin.update_features(
                self.state.image,
                [from_json(feature_admin.FeatureUpdate, u) for u in b["updates"]],
                bool(b.get("validate_only", False)),
                {str(k): int(v) for k, v in dict(b.get("defaults") or {}).items()},
            ),
        )

    async def _alter_broker_configs(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda b: broker_config_admin.alter_broker_configs(
                self.state.image,
                [from_json(broker_config_admin.BrokerConfigAlteration, e) for e in b["entries"]],
                bool(b.get("validate_only", False)),
            ),
        )

    # ---------------------------------------------------------------- metrics

    def _init_metrics(self) -> None:
        r = self.registry
        self._metrics_seen: tuple[int, int, bool] | None = None  # the image metrics show
        self._g_term = Gauge("sluice_controller_raft_term", "Current Raft term", registry=r)
        self._g_commit = Gauge(
            "sluice_controller_raft_commit_index", "Raft commit index", registry=r
        )
        self._g_lag = Gauge(
            "sluice_controller_apply_lag", "Committed entries not applied yet", registry=r
        )
        self._g_leader_changes = Gauge(
            "sluice_controller_leader_changes", "Leader changes seen by this node", registry=r
        )
        self._g_active = Gauge(
            "sluice_controller_active", "1 on the active controller, else 0", registry=r
        )
        # Kafka's name for the same value, read by operators' alerts (sum over the
        # controllers == 1).
        self._g_topic_count = Gauge(
            "kafka_controller_kafkacontroller_globaltopiccount",
            "Topics in the cluster; reported by the active controller, 0 on the others",
            registry=r,
        )
        self._g_partition_count = Gauge(
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster; reported by the active controller, 0 on the others",
            registry=r,
        )
        self._g_active_count = Gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, else 0 (sum over controllers: 1 when healthy)",
            registry=r,
        )
        # Seed 000's metrics under their Prometheus spelling, diskless topics only.
        self._g_rf = Gauge(
            "kafka_controller_diskless_effective_rf",
            "Replication factor a diskless topic was assigned at creation (seed 000)",
            ["topic"],
            registry=r,
        )
        self._g_rack_aware = Gauge(
            "kafka_controller_diskless_rack_aware",
            "1 if a diskless partition has one replica per rack (no two in one rack), else 0",
            ["topic", "partition"],
            registry=r,
        )
        self._g_rf1 = Gauge(
            "kafka_controller_diskless_rf1_topics_total",
            "Legacy RF=1 diskless topics (created under the old rule) not modernized yet",
            registry=r,
        )
        self._g_urp = Gauge(
            "sluice_controller_under_replicated_partitions",
            "Partitions under-replicated, cluster-wide: classic, ISR smaller than the replica "
            "set; diskless, a replica offline (informational). Brokers report their own led "
            "partitions as kafka_server_replicamanager_underreplicatedpartitions",
            registry=r,
        )
        self._g_offline = Gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions nobody serves (classic: no alive leader; diskless: no alive broker); "
            "reported by the active controller, 0 on the others",
            registry=r,
        )
        self._g_migration = Gauge(
            "sluice_controller_topic_migration_state",
            "A topic's migration between classic and diskless: 0 pending, 1 sealing, 2 migrated",
            ["topic", "direction"],
            registry=r,
        )
        self._g_boundary = Gauge(
            "sluice_controller_topic_migration_boundary_offset",
            "Where a migrated partition's new log starts",
            ["topic", "partition"],
            registry=r,
        )
        self._g_old_bytes = Gauge(
            "sluice_controller_topic_migration_old_log_bytes",
            "Bytes of a migrated topic's old logs (classic, or diskless) at their seals",
            ["topic"],
            registry=r,
        )

    def _update_metrics(self) -> None:
        self._g_term.set(self.node.term)
        self._g_commit.set(self.node.commit_index)
        self._g_lag.set(max(0, self.node.commit_index - self.node.applied_index))
        self._g_leader_changes.set(self.node.leader_changes)
        self._g_active.set(1 if self.node.is_leader else 0)
        self._g_active_count.set(1 if self.node.is_leader else 0)
        # The rest is a walk of every partition of the image: only when it changed (every
        # 0.2 s it was a tenth of an idle `sluice dev`'s CPU with 2,000 partitions).
        seen = (self.state.applied, id(self.state.image), self.node.is_leader)
        if seen == self._metrics_seen:
            return
        self._metrics_seen = seen
        m = image_metrics.collect(self.state.image)
        self._g_rf.clear()
        for topic, rf in m.effective_rf.items():
            self._g_rf.labels(topic).set(rf)
        self._g_rack_aware.clear()
        for (topic, partition), aware in m.rack_aware.items():
            self._g_rack_aware.labels(topic, str(partition)).set(1 if aware else 0)
        self._g_rf1.set(m.rf1_topics_total)
        self._g_urp.set(m.under_replicated_partitions)
        self._g_offline.set(m.offline_partitions if self.node.is_leader else 0)
        self._g_topic_count.set(m.topics if self.node.is_leader else 0)
        self._g_partition_count.set(m.partitions if self.node.is_leader else 0)
        mm = migration_metrics(self.state.image)
        for gauge in (self._g_migration, self._g_boundary, self._g_old_bytes):
            gauge.clear()
        for (topic, direction), value in mm.state.items():
            self._g_migration.labels(topic, direction).set(value)
        for (topic, partition), offset in mm.boundary.items():
            self._g_boundary.labels(topic, str(partition)).set(offset)
        for topic, size in mm.old_bytes.items():
            self._g_old_bytes.labels(topic).set(size)

    async def _metrics(self, _request: web.Request) -> web.Response:
        self._update_metrics()
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


def _now_ms() -> int:
    return int(time.time() * 1000)
