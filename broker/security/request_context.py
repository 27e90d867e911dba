"""What a handler knows of the request it answers: its header, the client's address, the
principal its connection authenticated as and the listener it came in on. Made by the
request pipeline (broker/server/connection.py), the only place that knows a connection;
handlers and the access checks take this instead."""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.security.listeners import DEFAULT_LISTENER
from broker.security.principal import ANONYMOUS
from protocol.build import build
from protocol.codec import RequestHeader


class RequestContext(NamedTuple):
    # A NamedTuple: made for every request, cheaper than a frozen dataclass.
    header: RequestHeader
    response_type: type
    client_host: str
    client_port: int
    # The connection's Kafka principal ("User:name"), ANONYMOUS until authenticated.
    principal: str = ANONYMOUS
    # The listener the client came in on: Metadata and friends answer with its addresses.
    listener: str = DEFAULT_LISTENER

    def respond(self, data: dict[str, Any]) -> Any:
        return build(self.response_type, data)
