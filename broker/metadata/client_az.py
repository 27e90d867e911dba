"""The client's availability zone, for the metadata transformer and byte metrics.

Precedence: a rack carried by the protocol (KIP-1163 adds ``RackId`` to
MetadataRequest; kio has no such field yet, so :func:`protocol_rack` is the seam that will
read it), then the ``diskless_az=<az>`` marker anywhere in ``client.id``, else unaware.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from broker.server.metrics import METRICS

if TYPE_CHECKING:
    from broker.metadata.view import ClusterView

# Inkless' ClientAZExtractor pattern: the marker at the start or after a comma or space;
# the AZ runs to the next '=', ',' or space. "my-app:diskless_az=x" (wrong separator) and
# "diskles_az=x" (typo) deliberately do not match.
CLIENT_AZ_PATTERN = re.compile(r"(^|[ ,])diskless_az=(?P<az>[^=, ]*)")


@lru_cache(maxsize=4096)
def az_from_client_id(client_id: str | None) -> str | None:
    """The AZ named in a client id, None when absent or empty. Cached: a client sends the
    same id on every request, and Metadata/Produce/Fetch all ask."""
    if not client_id:
        return None
    match = CLIENT_AZ_PATTERN.search(client_id)
    return match.group("az") or None if match else None


def protocol_rack(request: Any) -> str | None:
    """KIP-1163's ``RackId`` of a Metadata (or DescribeTopicPartitions) request, once a
    kio version decodes it; None until then, and for clients that do not send it."""
    rack = getattr(request, "rack_id", None)
    return rack or None


def client_az(client_id: str | None, request: Any = None) -> str | None:
    """The client's AZ: the protocol's rack first (KIP-1163 precedence), then client.id."""
    return protocol_rack(request) or az_from_client_id(client_id)


def az_label(known_racks: Iterable[str | None], az: str | None) -> str:
    """A bounded label for metrics: client ids are free text, so an AZ naming no broker
    rack is "other" rather than a new time series per typo."""
    if az is None:
        return "none"
    return az if az in known_racks else "other"


def count_bytes(broker: ClusterView, direction: str, az: str | None, nbytes: int) -> None:
    """Add one request's record bytes to ``sluice_client_bytes`` (once per request)."""
    if nbytes <= 0:
        return
    racks = {e.rack for e in broker.endpoints()}
    METRICS.client_bytes.labels(direction, az_label(racks, az), broker.config.rack or "none").inc(
        nbytes
    )


def count_fetch(broker: ClusterView, az: str | None, records: Sequence[Any]) -> None:
    count_bytes(broker, "fetch", az, sum(len(r) for r in records if r is not None))
