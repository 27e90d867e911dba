"""AlterUserScramCredentials on the active controller (KIP-554): checks, then records.

Kafka's rules: per user, all or nothing; a user named twice in one request (deleted and
upserted, or one mechanism twice) is refused with DUPLICATE_RESOURCE; deleting a credential
that does not exist is RESOURCE_NOT_FOUND; an empty name or an iteration count outside
4096..16384 is UNACCEPTABLE_CREDENTIAL.
"""

from __future__ import annotations

from base64 import b64encode
from collections import Counter
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from .image import MetadataImage
from .records import Record, RemoveUserScramCredential, UserScramCredential
from .requests import Outcome, ScramDeletion, ScramResult, ScramUpsertion

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


def alter_scram_credentials(
    image: MetadataImage, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
) -> Outcome[list[ScramResult]]:
    named = Counter((c.name, c.mechanism) for c in [*deletions, *upsertions])
    users: dict[str, list[ScramDeletion | ScramUpsertion]] = {}
    for change in [*deletions, *upsertions]:
        users.setdefault(change.name, []).append(change)
    records: list[Record] = []
    results: list[ScramResult] = []
    for name, changes in users.items():
        problem = _problem(image, name, changes, named)
        if problem is not None:
            results.append(ScramResult(name, *problem))
            continue
        for change in changes:
            if isinstance(change, ScramDeletion):
                records.append(RemoveUserScramCredential(name, change.mechanism))
            else:
                records.append(
                    UserScramCredential(
                        name,
                        change.mechanism,
                        b64encode(change.salt).decode(),
                        b64encode(change.stored_key).decode(),
                        b64encode(change.server_key).decode(),
                        change.iterations,
                    )
                )
        results.append(ScramResult(name, ErrorCode.none))
    return Outcome(records, results)


def _problem(
    image: MetadataImage,
    name: str,
    changes: list[ScramDeletion | ScramUpsertion],
    named: Counter[tuple[str, str]],
) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    for change in changes:
        if named[(name, change.mechanism)] > 1:
            return ErrorCode.duplicate_resource, "A user credential cannot be altered twice"
        if change.mechanism not in MECHANISMS:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if isinstance(change, ScramDeletion):
            if (name, change.mechanism) not in image.scram_credentials:
                return (
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
        elif not MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS:
            return (
                ErrorCode.unacceptable_credential,
                f"Iterations {change.iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}",
            )
        elif not change.salt or not change.stored_key or not change.server_key:
            return ErrorCode.unacceptable_credential, "Empty salt or keys"
    return None
