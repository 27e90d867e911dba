"""The broker's HTTP client to the controller quorum (the API of ``controller/wire.py``).

Writes (registration, heartbeats, topic admin, reassignments) must reach the active
controller: the client tries the last one that answered as leader first, follows the
``421`` leader hints of the others and otherwise walks the configured controllers with a
short, growing backoff until a deadline. Reads of the metadata log (``GET /v1/metadata``)
may be answered by any controller: the client asks the active one when it knows it, else
sticks to the one that last answered.

Every request is bounded (``request_timeout`` per attempt, ``deadline`` overall): a broker
must answer its own clients even when no controller is reachable, with a retriable error
(``ControllerUnavailable`` maps to REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

import aiohttp
from kio.schema.errors import ErrorCode

from common.acl import AclBinding, AclFilter
from controller.acl_admin import (
    AclCreationResult,
    AclDeletionResult,
    QuotaAlteration,
    QuotaResult,
)
from controller.broker_config_admin import BrokerConfigAlteration, BrokerConfigResult
from controller.feature_admin import FeatureUpdate
from controller.migration import SealReport
from controller.requests import (
    AlterPartitionResult,
    AlterTopicConfigs,
    BrokerRegistrationRequest,
    CreateTopicResult,
    DeleteTopicResult,
    DisableRemoteAck,
    ElectionResult,
    ErrorResult,
    HeartbeatResult,
    IsrChange,
    LeaderElection,
    NewPartitions,
    NewTopic,
    OngoingReassignment,
    Reassignment,
    ReassignmentResult,
    RegistrationResult,
    ScramDeletion,
    ScramResult,
    ScramUpsertion,
    TopicResult,
)
from controller.wire import from_json, to_json

log = logging.getLogger(__name__)

T = TypeVar("T")
SECRET_HEADER = "X-Sluice-Secret"
MAX_BACKOFF_S = 1.0  # between rounds of every controller failing
NOT_LEADER = 421  # HTTP "Misdirected Request": this controller is not the active one


class ControllerRefused(Exception):
    """The controller refused one item of a request (a Kafka error code and message)."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class ControllerUnavailable(ControllerRefused):
    """No controller answered in time: the outcome of a write is unknown. Retriable."""

    dependency_outage = True  # storage.outage

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.request_timed_out, message)


class ControllerRequestError(ControllerRefused):
    """A controller rejected the HTTP request itself (4xx other than 421): a bug or a
    configuration mismatch (wrong secret), not worth retrying."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(ErrorCode.unknown_server_error, f"controller answered {status}: {body}")
        self.status = status


@dataclass(frozen=True)
class MetadataChunk:
    """One answer of ``GET /v1/metadata``."""

    applied: int
    leader: Any
    snapshot: bytes | None
    snapshot_index: int
    entries: list[tuple[int, bytes]]


def base_url(address: str, scheme: str = "http") -> str:
    address = address.strip().rstrip("/")
    return address if "://" in address else f"{scheme}://{address}"


def client_ssl_context(
    ca_location: str, certificate_location: str = "", key_location: str = ""
) -> ssl.SSLContext | None:
    """TLS to the controllers: their certificates checked against ``ca_location``; this
    broker's own certificate presented when given (controllers with ssl.client.auth)."""
    if not ca_location:
        return None
    context = ssl.create_default_context(cafile=ca_location)
    if certificate_location:
        context.load_cert_chain(certificate_location, key_location or None)
    return context


class ControllerClient:
    def __init__(
        self,
        servers: Sequence[str],
        secret: str = "",
        request_timeout: float = 5.0,
        deadline: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not servers:
            raise ValueError("no controller given (controller.quorum.bootstrap.servers)")
        # With TLS settings, a bare host:port means https (never send the secret in clear
        # to a controller that was meant to be reached over TLS).
        scheme = "https" if ssl_context is not None else "http"
        self._urls = [base_url(s, scheme) for s in servers]
        self._ssl = ssl_context
        self._headers = {SECRET_HEADER: secret} if secret else {}
        self.request_timeout = request_timeout
        self.deadline = deadline
        self._leader: str | None = None  # the last controller that served a write
        self._reader = 0  # index of the controller the metadata long poll sticks to
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl) if self._ssl is not None else None
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def leader_url(self) -> str | None:
        return self._leader

    # --- transport -----------------------------------------------------------------------

    async def _attempt(
        self, method: str, url: str, body: Any, params: Mapping[str, str] | None, timeout: float
    ) -> tuple[int, Any]:
        if self._session is None:
            await self.start()
        assert self._session is not None
        async with self._session.request(
            method,
            url,
            json=body,
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            text = await resp.text()
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = text
            return resp.status, data

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        *,
        any_controller: bool = False,
        timeout: float | None = None,
        deadline: float | None = None,
        max_backoff: float = MAX_BACKOFF_S,
    ) -> Any:
        """The JSON answer of the active controller (or of any, for reads), retrying
        others until ``deadline`` seconds passed; raises ControllerUnavailable then.

        A controller that cannot be reached or is not the active one sends the request on
        to the next at once; only when every controller failed in a row does it back off
        (doubling, up to ``max_backoff``). After a failover the new active controller is
        then found within one round, not after a backoff that grew while the election
        ran: a broker's heartbeats must reach it well within a session."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (self.deadline if deadline is None else deadline)
        per_try = self.request_timeout if timeout is None else timeout
        backoff = min(0.05, max_backoff)
        failed_in_row = 0  # controllers that failed since the last backoff
        last_error = "no controller tried"
        # The active controller first, reads too: it is never behind (a follower that
        # restarts or is cut off from the quorum may be), so read-your-writes is quick.
        next_url = self._leader
        followed: set[str] = set()  # leader hints followed since the last backoff
        # The round goes on from the controller after the one tried first.
        turn = self._urls.index(next_url) + 1 if next_url in self._urls else 0
        while True:
            if next_url is not None:
                url, next_url = next_url, None
            elif any_controller:
                url = self._urls[self._reader % len(self._urls)]
            else:
                url = self._urls[turn % len(self._urls)]
                turn += 1
            try:
                status, data = await self._attempt(
                    method, url + path, body, params, min(per_try, max(give_up - loop.time(), 0.1))
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last_error = f"{url}: {exc!r}"
                status, data = -1, None
            if 200 <= status < 300:
                if not any_controller:
                    self._leader = url
                elif url != self._leader:
                    self._reader = self._index(url)
                return data
            if status == NOT_LEADER:
                last_error = f"{url} is not the active controller"
                hint = data.get("leader_url") if isinstance(data, dict) else None
                if self._leader == url:
                    self._leader = None
                if hint and base_url(hint) != url and base_url(hint) not in followed:
                    # Follow the hint at once: that is where the write belongs.
                    next_url = base_url(hint)
                    followed.add(next_url)
                    continue
            elif 400 <= status < 500:
                raise ControllerRequestError(status, str(data))
            else:
                if status >= 500:
                    last_error = f"{url} answered {status}: {data}"
                if self._leader == url:
                    self._leader = None
                elif any_controller:
                    self._reader += 1
            failed_in_row += 1
            if failed_in_row < len(self._urls) and loop.time() < give_up:
                continue  # the next controller may be the active one
            if loop.time() + backoff >= give_up:
                raise ControllerUnavailable(f"no controller answered: {last_error}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
            failed_in_row = 0
            followed.clear()

    def _index(self, url: str) -> int:
        return self._urls.index(url) if url in self._urls else self._reader

    async def _write(self, path: str, body: Any) -> tuple[Any, int]:
        data = await self.request("POST", path, body)
        applied = data.get("applied", 0) if isinstance(data, dict) else 0
        return data, int(applied or 0)

    @staticmethod
    def _results(cls: type[T], data: Any) -> list[T]:
        return [from_json(cls, item) for item in data.get("results", [])]

    # --- the quorum ----------------------------------------------------------------------

    async def quorum_status(self) -> list[tuple[str, dict[str, Any] | None]]:
        """Every configured controller's ``GET /v1/status`` (its Raft role, term, indexes;
        the leader's view of its followers), asked at once: (base URL, answer or None when
        it did not answer in time). No retries: a status is a snapshot for an operator."""

        async def one(url: str) -> tuple[str, dict[str, Any] | None]:
            try:
                code, data = await self._attempt("GET", url + "/v1/status", None, None, 2.0)
            except (aiohttp.ClientError, TimeoutError, OSError):
                return url, None
            return url, data if code == 200 and isinstance(data, dict) else None

        return list(await asyncio.gather(*(one(u) for u in self._urls)))

    # --- brokers -------------------------------------------------------------------------

    async def register(self, request: BrokerRegistrationRequest) -> tuple[RegistrationResult, int]:
        data, applied = await self._write("/v1/brokers/register", to_json(request))
        return from_json(RegistrationResult, data), applied

    async def heartbeat(
        self,
        node_id: int,
        broker_epoch: int,
        want_fence: bool = False,
        want_shutdown: bool = False,
        deadline: float | None = None,
        disabled_remote: Sequence[DisableRemoteAck] = (),
        max_backoff: float = MAX_BACKOFF_S,
        timeout: float | None = None,
    ) -> tuple[HeartbeatResult, int]:
        """``disabled_remote``: this broker's answers to the controller's DisableRemoteTopic
        requests (KIP-950), which come back in the answer's ``disable_remote``.
        ``max_backoff`` and ``timeout`` (per attempt): see :meth:`request`."""
        body = {
            "node_id": node_id,
            "broker_epoch": broker_epoch,
            "want_fence": want_fence,
            "want_shutdown": want_shutdown,
            "disabled_remote": to_json(list(disabled_remote)),
        }
        data = await self.request(
            "POST",
            "/v1/brokers/heartbeat",
            body,
            deadline=deadline,
            max_backoff=max_backoff,
            timeout=timeout,
        )
        return from_json(HeartbeatResult, data), int(data.get("applied", 0) or 0)

    async def unregister(self, node_id: int) -> tuple[ErrorResult, int]:
        data, applied = await self._write("/v1/brokers/unregister", {"node_id": node_id})
        return from_json(ErrorResult, data), applied

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool, defaults: dict[str, int]
    ) -> tuple[ErrorResult, int]:
        """UpdateFeatures; ``defaults``: this broker's levels of the features the log may not
        have finalized yet (its configuration)."""
        body = {
            "updates": to_json(list(updates)),
            "validate_only": validate_only,
            "defaults": defaults,
        }
        data, applied = await self._write("/v1/features/update", body)
        return from_json(ErrorResult, data), applied

    # --- topics --------------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool = False
    ) -> tuple[list[CreateTopicResult], int]:
        body = {"topics": to_json(list(topics)), "validate_only": validate_only}
        data, applied = await self._write("/v1/topics/create", body)
        return self._results(CreateTopicResult, data), applied

    async def delete_topics(
        self, topics: Sequence[str | UUID]
    ) -> tuple[list[DeleteTopicResult], int]:
        data, applied = await self._write("/v1/topics/delete", {"topics": to_json(list(topics))})
        return self._results(DeleteTopicResult, data), applied

    async def create_partitions(
        self, topics: Sequence[NewPartitions], validate_only: bool = False
    ) -> tuple[list[TopicResult], int]:
        body = {"topics": to_json(list(topics)), "validate_only": validate_only}
        data, applied = await self._write("/v1/topics/partitions", body)
        return self._results(TopicResult, data), applied

    async def alter_configs(
        self, topics: Sequence[AlterTopicConfigs], validate_only: bool = False
    ) -> tuple[list[TopicResult], int]:
        body = {"topics": to_json(list(topics)), "validate_only": validate_only}
        data, applied = await self._write("/v1/topics/configs", body)
        return self._results(TopicResult, data), applied

    # --- reassignments -------------------------------------------------------------------

    async def alter_reassignments(
        self, reassignments: Sequence[Reassignment]
    ) -> tuple[list[ReassignmentResult], int]:
        body = {"reassignments": to_json(list(reassignments))}
        data, applied = await self._write("/v1/reassignments", body)
        return self._results(ReassignmentResult, data), applied

    async def elect_leaders(self, election: LeaderElection) -> tuple[list[ElectionResult], int]:
        body = {
            "election_type": election.election_type,
            "partitions": None if election.partitions is None else list(election.partitions),
        }
        data, applied = await self._write("/v1/leaders/elect", body)
        return self._results(ElectionResult, data), applied

    async def list_reassignments(self) -> list[OngoingReassignment]:
        data = await self.request("GET", "/v1/reassignments")
        return self._results(OngoingReassignment, data)

    # --- SCRAM credentials -----------------------------------------------------------------

    async def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> tuple[list[ScramResult], int]:
        body = {"deletions": to_json(list(deletions)), "upsertions": to_json(list(upsertions))}
        data, applied = await self._write("/v1/scram", body)
        return self._results(ScramResult, data), applied

    # --- authorization: ACLs and client quotas --------------------------------------------

    async def create_acls(
        self, creations: Sequence[AclBinding]
    ) -> tuple[list[AclCreationResult], int]:
        data, applied = await self._write("/v1/acls/create", {"creations": to_json(creations)})
        return self._results(AclCreationResult, data), applied

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> tuple[list[AclDeletionResult], int]:
        data, applied = await self._write("/v1/acls/delete", {"filters": to_json(filters)})
        return self._results(AclDeletionResult, data), applied

    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> tuple[list[QuotaResult], int]:
        body = {"entries": to_json(entries), "validate_only": validate_only}
        data, applied = await self._write("/v1/quotas/alter", body)
        return self._results(QuotaResult, data), applied

    async def alter_broker_configs(
        self, entries: Sequence[BrokerConfigAlteration], validate_only: bool
    ) -> tuple[list[BrokerConfigResult], int]:
        """Dynamic broker configs (controller.broker_config_admin)."""
        body = {"entries": to_json(entries), "validate_only": validate_only}
        data, applied = await self._write("/v1/broker-configs/alter", body)
        return self._results(BrokerConfigResult, data), applied

    # --- classic partitions ------------------------------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> tuple[AlterPartitionResult, int]:
        """AlterPartition: a classic partition leader's ISR change."""
        body = {"broker_id": broker_id, "broker_epoch": broker_epoch, "changes": to_json(changes)}
        data, applied = await self._write("/v1/partitions/isr", body)
        return from_json(AlterPartitionResult, data), applied

    async def partition_sealed(self, report: SealReport) -> tuple[ErrorResult, int]:
        """A leader sealed its partition for a migration (controller.migration)."""
        data, applied = await self._write("/v1/migrations/sealed", to_json(report))
        return from_json(ErrorResult, data), applied

    # --- the metadata log ----------------------------------------------------------------

    async def metadata(
        self, after: int, wait_ms: int, deadline: float | None = None, from_leader: bool = False
    ) -> MetadataChunk:
        """``from_leader``: a linearizable read from the active controller, whose answer then
        holds every write answered before it (another voter may lag behind)."""
        params = {"after": str(after), "wait_ms": str(wait_ms)}
        if from_leader:
            params["linearizable"] = "1"
        data = await self.request(
            "GET",
            "/v1/metadata",
            params=params,
            any_controller=not from_leader,
            timeout=wait_ms / 1000 + self.request_timeout,
            deadline=deadline,
        )
        snapshot = data.get("snapshot")
        applied = int(data.get("applied", 0))
        return MetadataChunk(
            applied=applied,
            leader=data.get("leader"),
            snapshot=base64.b64decode(snapshot) if snapshot else None,
            snapshot_index=int(data.get("snapshot_index", applied) or applied),
            entries=[
                (int(e["index"]), base64.b64decode(e["data"])) for e in data.get("entries", [])
            ],
        )
