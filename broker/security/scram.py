"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802/7677, as Kafka's KIP-84 uses them).

The exchange itself is the ``scramp`` library's. The server keeps only what RFC 5802 calls
the stored key and the server key (with salt and iteration count), never a password: Kafka's
AlterUserScramCredentials already sends a salted password, from which both keys are derived
here and the salted password dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import scramp
from scramp import core as scramp_core

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's ids for the mechanisms in AlterUserScramCredentials/DescribeUserScramCredentials.
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_ID = {name: number for number, name in MECHANISM_IDS.items()}
# Kafka's bounds on the iteration count of a credential.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_HASH_BYTES = {"SCRAM-SHA-256": hashlib.sha256().digest_size, "SCRAM-SHA-512": 64}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class ScramFailure(Exception):
    pass


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The keys the server keeps, from what AlterUserScramCredentials carries."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism}")
    if len(salted_password) != _HASH_BYTES[mechanism]:
        raise ValueError(f"a {mechanism} salted password is {_HASH_BYTES[mechanism]} bytes")
    hf = scramp.ScramMechanism(mechanism).hf
    # scramp's own derivation (RFC 5802: ClientKey, StoredKey = H(ClientKey), ServerKey).
    _, stored_key, server_key = scramp_core._c_key_stored_key_s_key(hf, salted_password)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, iterations: int) -> ScramCredential:
    """A new credential (random salt) for a password: tests and ``cluster up --secure``."""
    salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    return ScramCredential(mechanism, salt, stored_key, server_key, i)


def _sasl_name_to_user(name: str) -> str:
    # RFC 5802 escapes ',' and '=' in the username as =2C and =3D; Kafka unescapes them.
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """Server side of one SCRAM exchange: client-first, then client-final."""

    def __init__(
        self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self.username = ""
        self.done = False

    def _auth_info(self, sasl_name: str) -> tuple[bytes, bytes, bytes, int]:
        self.username = _sasl_name_to_user(sasl_name)
        credential = self._lookup(self.username, self.mechanism)
        if credential is None:
            raise ScramFailure("unknown user")
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise ScramFailure("not UTF-8") from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._accept_repeated_client_nonce(text)
                self._server.set_client_final(text)
                self.done = True
                return self._server.get_server_final().encode()
        except ScramFailure:
            raise
        except scramp.ScramException as exc:
            raise ScramFailure(str(exc)) from None
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            # scramp parses hostile messages; whatever it trips on is a failed exchange.
            raise ScramFailure(f"malformed message: {type(exc).__name__}") from None
        raise ScramFailure("unexpected SCRAM message after the exchange ended")

    def _accept_repeated_client_nonce(self, client_final: str) -> None:
        """librdkafka 2.0 sends its own nonce again in front of the combined one in its
        final message (r=<client nonce><client nonce><server nonce>). Kafka's server only
        checks that the final nonce *ends with* the combined nonce, so those clients work
        against Kafka; the same check here. The proof is still verified over the message
        exactly as the client sent it, so this accepts nothing a wrong password could pass."""
        expected = str(self._server.nonce)
        for attribute in client_final.split(","):
            if attribute.startswith("r="):
                sent = attribute[2:]
                if sent != expected and sent.endswith(expected):
                    self._server.nonce = scramp_core.Nonce(sent)
                return
