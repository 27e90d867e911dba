"""The client's availability zone, for the metadata transformer and byte metrics.

Precedence: a rack carried by the protocol (KIP-1163 adds ``RackId`` to
MetadataRequest; kio has no such field yet, so :func:`protocol_rack` is the seam that will
read it), then the ``diskless_az=<az>`` marker anywhere in ``client.id``, else unaware.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from broker.server.metrics import METRICS

if TYPE_CHECKING:
    from broker.metadata.membership import BrokerEndpoint

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


class ClientBytes:
    """``sluice_client_bytes``: each request's record bytes, counted once, by direction,
    the client's AZ and this broker's rack. The labelled counter of a (direction, AZ) is
    made once and kept until the live brokers change (``live_changed``, called by the
    membership): the AZ label is "other" for an AZ that names no live broker's rack."""

    __slots__ = ("_counters", "_live", "_rack")

    def __init__(self, live: Callable[[], Iterable[BrokerEndpoint]], rack: str | None) -> None:
        self._live = live
        self._rack = rack or "none"
        self._counters: dict[tuple[str, str | None], Any] = {}

    def live_changed(self) -> None:
        self._counters = {}

    def count(self, direction: str, az: str | None, nbytes: int) -> None:
        """Add one request's record bytes (once per request)."""
        if nbytes <= 0:
            return
        counter = self._counters.get((direction, az))
        if counter is None:
            if len(self._counters) >= _MAX_COUNTERS:
                self._counters = {}  # client ids are free text: bounded, rebuilt on use
            racks = {e.rack for e in self._live()}
            counter = METRICS.client_bytes.labels(direction, az_label(racks, az), self._rack)
            self._counters[(direction, az)] = counter
        counter.inc(nbytes)

    def count_fetch(self, az: str | None, records: Sequence[Any]) -> None:
        self.count("fetch", az, sum(len(r) for r in records if r is not None))


_MAX_COUNTERS = 4096
