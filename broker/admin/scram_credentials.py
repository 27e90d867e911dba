"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), KIP-554.

Credentials live in the controller's metadata log (controller/scram_admin.py), so every
broker checks SCRAM logins against the same ones. The broker turns the salted password a
client sends into the stored and server keys before forwarding: neither the password nor
the salted password leaves this handler, and neither is logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access, scram
from common.acl import AclOperation
from controller.requests import ScramDeletion, ScramUpsertion

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

log = logging.getLogger(__name__)

_NO_CONTROLLER = "SCRAM credentials need the controller (controller mode or `sluice dev`)"


async def describe(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    # Kafka: DESCRIBE on the cluster. Its refusal has one result per user asked for, each
    # with the error and no name (DescribeUserScramCredentialsRequest.getErrorResponse).
    if access.cluster_refusal(broker, ctx, AclOperation.DESCRIBE) is not None:
        refused = int(ErrorCode.cluster_authorization_failed)
        return ctx.respond(
            {
                "error_code": refused,
                "error_message": None,
                "results": [
                    {"user": "", "error_code": refused, "error_message": None}
                    for _ in request.users or ()
                ],
            }
        )
    if broker.controller is None:
        return ctx.respond(
            {
                "error_code": int(ErrorCode.unsupported_version),
                "error_message": _NO_CONTROLLER,
                "results": [],
            }
        )
    credentials = broker.controller.image.scram_credentials
    by_user: dict[str, list[dict[str, int]]] = {}
    for (name, mechanism), entry in sorted(credentials.items()):
        by_user.setdefault(name, []).append(
            {"mechanism": scram.MECHANISM_ID[mechanism], "iterations": entry.iterations}
        )
    results = []
    # Null or empty: every user with a credential (Kafka's schema says so, and its Java
    # AdminClient sends an empty list to describe all, as `kafka-configs --describe
    # --entity-type users` does).
    names = list(by_user) if not request.users else [u.name for u in request.users]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            results.append(
                {
                    "user": name,
                    "error_code": int(ErrorCode.duplicate_resource),
                    "error_message": "Cannot describe SCRAM credentials for the same user twice",
                }
            )
            continue
        seen.add(name)
        if name not in by_user:
            results.append(
                {
                    "user": name,
                    "error_code": int(ErrorCode.resource_not_found),
                    "error_message": "Attempt to describe a user credential that does not exist",
                }
            )
            continue
        results.append({"user": name, "error_code": 0, "credential_infos": by_user[name]})
    return ctx.respond({"throttle_time": 0, "error_code": 0, "results": results})


async def alter(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    names = [c.name for c in (*request.deletions, *request.upsertions)]
    if not access.cluster(broker, ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster
        refused = ErrorCode.cluster_authorization_failed
        return ctx.respond({"results": [_error(n, refused, None) for n in dict.fromkeys(names)]})
    if broker.controller is None:
        return ctx.respond(
            {"results": [_error(n, ErrorCode.unsupported_version, _NO_CONTROLLER) for n in names]}
        )
    refused: dict[str, dict[str, Any]] = {}
    deletions: list[ScramDeletion] = []
    upsertions: list[ScramUpsertion] = []
    for d in request.deletions:
        mechanism = scram.MECHANISM_IDS.get(int(d.mechanism))
        if mechanism is None:
            refused[d.name] = _error(
                d.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            )
            continue
        deletions.append(ScramDeletion(d.name, mechanism))
    for u in request.upsertions:
        mechanism = scram.MECHANISM_IDS.get(int(u.mechanism))
        if mechanism is None:
            refused[u.name] = _error(
                u.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            )
            continue
        try:
            credential = scram.credential_from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
            )
        except ValueError as exc:
            refused[u.name] = _error(u.name, ErrorCode.unacceptable_credential, str(exc))
            continue
        upsertions.append(
            ScramUpsertion(
                u.name,
                mechanism,
                credential.salt,
                credential.stored_key,
                credential.server_key,
                credential.iterations,
            )
        )
    # A user refused here is refused as a whole (Kafka's all-or-nothing per user).
    deletions = [d for d in deletions if d.name not in refused]
    upsertions = [u for u in upsertions if u.name not in refused]
    answers: dict[str, dict[str, Any]] = dict(refused)
    if deletions or upsertions:
        try:
            results, applied = await broker.controller.client.alter_scram_credentials(
                deletions, upsertions
            )
            # Answered once this broker's image has the change: a login right after works.
            await broker.controller.caught_up(applied)
            for r in results:
                answers[r.user] = _error(r.user, r.error_code, r.error_message)
        except ControllerRefused as exc:
            for name in {c.name for c in (*deletions, *upsertions)}:
                answers[name] = _error(name, exc.code, exc.message)
    ordered = list(dict.fromkeys(names))
    return ctx.respond(
        {"throttle_time": 0, "results": [answers[n] for n in ordered if n in answers]}
    )


def _error(user: str, code: ErrorCode | int, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": int(code), "error_message": message}
