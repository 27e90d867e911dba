"""Kafka's ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``.

A listener is a name (``PLAINTEXT``, ``SASL_SSL``, or any custom name mapped to a protocol),
a bind address and a security protocol; each gets its own server socket. Clients are told
the advertised address of the listener they came in on, so one broker can serve
``SASL_SSL`` to the outside and ``PLAINTEXT`` to a private network at once.

Without ``listeners`` the broker has one PLAINTEXT listener on ``host:port``, the
single-port broker it always was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from broker.config import BrokerConfig


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_LISTENER = "PLAINTEXT"
# Kafka's listener names: letters, digits, underscore, dash (upper-cased in the map).
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper case, as Kafka normalises it
    protocol: SecurityProtocol
    host: str  # empty: every interface (bind) / advertised.host (advertise)
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...``. Every protocol's own name maps to it, as in Kafka's default."""
    out = {p.value: p for p in SecurityProtocol}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.match(name):
            raise ValueError(
                f"listener.security.protocol.map entry {entry!r}: expected NAME:PROTOCOL"
            )
        try:
            out[name] = SecurityProtocol(protocol)
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ValueError(
                f"listener.security.protocol.map entry {entry!r}: protocol must be one of {known}"
            ) from None
    return out


def parse_listeners(
    text: str, protocols: dict[str, SecurityProtocol], setting: str = "listeners"
) -> list[Listener]:
    """``NAME://host:port,...``: a name at most once, each name in the protocol map."""
    out: list[Listener] = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, address = entry.partition("://")
        name = name.upper()
        if not sep or not _NAME.match(name):
            raise ValueError(f"{setting} entry {entry!r}: expected NAME://host:port")
        host, colon, port = address.rpartition(":")
        if not colon or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"{setting} entry {entry!r}: expected NAME://host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # an IPv6 literal
        protocol = protocols.get(name)
        if protocol is None:
            raise ValueError(
                f"{setting} entry {entry!r}: listener {name} is not in "
                "listener.security.protocol.map"
            )
        if any(listener.name == name for listener in out):
            raise ValueError(f"{setting}: listener {name} is listed twice")
        out.append(Listener(name, protocol, host, int(port)))
    return out


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    """What a broker binds and what it tells clients and the controller."""

    bound: list[Listener]
    advertised: dict[str, Listener]  # by name; a port of 0 is replaced once bound
    inter_broker: str  # the listener whose address is the broker's registered host:port

    def protocol(self, name: str) -> SecurityProtocol:
        for listener in self.bound:
            if listener.name == name:
                return listener.protocol
        raise KeyError(name)


def listener_plan(config: BrokerConfig) -> ListenerPlan:
    """The listeners ``config`` asks for, checked against each other (raises ValueError)."""
    if not config.listeners.strip():
        if config.advertised_listeners.strip() or config.inter_broker_listener_name.strip():
            raise ValueError("advertised.listeners and inter.broker.listener.name need listeners")
        only = Listener(DEFAULT_LISTENER, SecurityProtocol.PLAINTEXT, config.host, config.port)
        advertised = Listener(DEFAULT_LISTENER, SecurityProtocol.PLAINTEXT, config.advertised, 0)
        return ListenerPlan([only], {DEFAULT_LISTENER: advertised}, DEFAULT_LISTENER)
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    bound = parse_listeners(config.listeners, protocols)
    if not bound:
        raise ValueError("listeners names no listener")
    names = [listener.name for listener in bound]
    given = parse_listeners(config.advertised_listeners, protocols, "advertised.listeners")
    for listener in given:
        if listener.name not in names:
            raise ValueError(f"advertised.listeners names {listener.name}, not in listeners")
    advertised: dict[str, Listener] = {}
    for listener in bound:
        chosen = next((g for g in given if g.name == listener.name), None)
        if chosen is None:
            # Not advertised explicitly: the bind address, with the port as bound (0 is
            # replaced later); an empty bind host (every interface) by advertised.host.
            chosen = Listener(listener.name, listener.protocol, listener.host, 0)
        host = chosen.host or config.advertised
        if host in ("0.0.0.0", "::"):
            raise ValueError(
                f"listener {listener.name}: {host} cannot be advertised; "
                "set advertised.listeners or advertised.host"
            )
        advertised[listener.name] = Listener(listener.name, listener.protocol, host, chosen.port)
    inter = config.inter_broker_listener_name.strip().upper()
    if inter and inter not in names:
        raise ValueError(f"inter.broker.listener.name {inter} is not in listeners")
    if not inter:
        # Kafka's default is PLAINTEXT (security.inter.broker.protocol); without a PLAINTEXT
        # listener, the first one stands in.
        inter = DEFAULT_LISTENER if DEFAULT_LISTENER in names else names[0]
    return ListenerPlan(bound, advertised, inter)
