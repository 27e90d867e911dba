"""The client side of SASL/PLAIN and SASL/SCRAM, for a broker talking to another broker
(the replica fetcher, the transaction coordinator's markers).

Credentials come from the inter-broker listener's JAAS config, as Kafka's brokers take them:
``username=`` and ``password=`` of the login module configured for the mechanism
(``listener.name.<l>.<mechanism>.sasl.jaas.config``, then the listener's or the broker's
``sasl.jaas.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import scramp

from broker.security import scram

CLIENT_MECHANISMS = ("PLAIN", *scram.MECHANISMS)


class SaslClientFailure(Exception):
    """The server's answer does not fit the exchange (a wrong server signature, garbage)."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)  # never in a log line or a traceback


class ClientExchange(Protocol):
    done: bool

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None:
        """The next message, or None when the exchange is complete."""
        ...


class PlainClient:
    """RFC 4616: one message, no answer expected beyond success."""

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\x00" + username.encode() + b"\x00" + password.encode()
        self.done = False

    def first(self) -> bytes:
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        self.done = True
        return None


class ScramClient:
    """RFC 5802: client-first, client-final, then the server's signature is checked (a
    server that does not know the password cannot impersonate the leader)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        # scramp escapes ',' and '=' in the name itself (RFC 5802).
        self._client = scramp.ScramClient([mechanism], username, password)
        self._sent_final = False
        self.done = False

    def first(self) -> bytes:
        return self._client.get_client_first().encode()

    def step(self, challenge: bytes) -> bytes | None:
        try:
            text = challenge.decode()
            if not self._sent_final:
                iterations = _iterations(text)
                if not 0 < iterations <= scram.MAX_ITERATIONS:
                    # PBKDF2 runs on the event loop: a hostile server must not make it spin.
                    raise SaslClientFailure(f"SCRAM: {iterations} iterations")
                self._client.set_server_first(text)
                self._sent_final = True
                return self._client.get_client_final().encode()
            self._client.set_server_final(text)
        except (UnicodeDecodeError, scramp.ScramException) as exc:
            raise SaslClientFailure(f"SCRAM: {exc}") from None
        self.done = True
        return None


def _iterations(server_first: str) -> int:
    for attribute in server_first.split(","):
        if attribute.startswith("i=") and attribute[2:].isdigit():
            return int(attribute[2:])
    return -1


def client_exchange(credentials: SaslCredentials) -> ClientExchange:
    if credentials.mechanism == "PLAIN":
        return PlainClient(credentials.username, credentials.password)
    if credentials.mechanism in scram.MECHANISMS:
        return ScramClient(credentials.mechanism, credentials.username, credentials.password)
    raise ValueError(f"SASL mechanism {credentials.mechanism} has no client side here")
