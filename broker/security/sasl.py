"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: SaslHandshake (key 17) and SaslAuthenticate
(key 36, KIP-152), with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER; re-authentication
(KIP-368, ``connections.max.reauth.ms``).

One :class:`SaslAuthenticator` per listener knows the mechanisms and their users; one
:class:`SaslSession` per connection walks the exchange. Until it completes, the connection may
send only ApiVersions, SaslHandshake and SaslAuthenticate (the server closes it otherwise, as
Kafka does). A failed exchange is answered with SASL_AUTHENTICATION_FAILED and a message, and
the connection is closed after that answer.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.security import oauthbearer, scram
from broker.security.principal import user

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
API_VERSIONS_KEY = 18
PRE_AUTH_APIS = frozenset((API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY))
# No SASL message of these mechanisms is anywhere near this; a bigger one is hostile.
MAX_TOKEN_BYTES = 64 * 1024
# Kafka's sasl.server.max.receive.size: the largest frame before authentication.
MAX_UNAUTHENTICATED_FRAME = 512 * 1024
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

ScramLookup = Callable[[str, str], scram.ScramCredential | None]


class AuthenticationFailed(Exception):
    """Answered with SASL_AUTHENTICATION_FAILED and this message; then the connection closes."""


# --- JAAS configs -----------------------------------------------------------------------------

_JAAS_TOKEN = re.compile(
    r'\s*(?:(?P<semi>;)|(?P<key>[A-Za-z0-9_.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|'
    r"(?P<bare>[^\s;\"]+))|(?P<word>[A-Za-z0-9_.$-]+))"
)


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas(text: str) -> JaasEntry:
    """One login module entry of a ``sasl.jaas.config`` value:
    ``<LoginModule class> <flag> key="value" ... ;``. Raises ValueError (without echoing
    values: they are passwords)."""
    pos, words, options = 0, [], {}
    ended = False
    text = text.strip()
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"sasl.jaas.config: cannot parse at character {pos}")
        pos = match.end()
        if ended:
            raise ValueError("sasl.jaas.config: text after the terminating ';'")
        if match.group("semi"):
            ended = True
        elif match.group("key"):
            quoted = match.group("quoted")
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else match.group("bare")
            options[match.group("key")] = value
        else:
            if options:
                raise ValueError("sasl.jaas.config: the login module and flag come first")
            words.append(match.group("word"))
        if pos < len(text) and text[pos:].strip() == "":
            break
    if not ended:
        raise ValueError("sasl.jaas.config: an entry ends with ';'")
    if len(words) != 2:
        raise ValueError("sasl.jaas.config: expected '<LoginModule> <flag> options... ;'")
    flag = words[1].lower()
    if flag not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"sasl.jaas.config: unknown control flag {words[1]!r}")
    return JaasEntry(words[0], flag, options)


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """PlainLoginModule's ``user_<name>="<password>"`` options."""
    return {
        k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_") and k[5:]
    }


# --- exchanges --------------------------------------------------------------------------------


class Exchange(Protocol):
    done: bool

    def step(self, token: bytes) -> bytes: ...

    @property
    def principal(self) -> str: ...

    @property
    def expires_at_ms(self) -> int | None: ...


class PlainExchange:
    """RFC 4616: one message, ``authzid NUL authcid NUL passwd``."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._user = ""
        self.done = False

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("Authentication failed: unexpected message")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: invalid SASL/PLAIN message")
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(
                "Authentication failed: invalid SASL/PLAIN message"
            ) from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        expected = self._users.get(username)
        # compare_digest either way: the time taken does not say whether the user exists.
        ok = hmac.compare_digest(password.encode(), (expected or "\x00" + password).encode())
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self._user = username
        self.done = True
        return b""

    @property
    def principal(self) -> str:
        return user(self._user)

    @property
    def expires_at_ms(self) -> int | None:
        return None


class ScramServerExchange:
    def __init__(self, mechanism: str, lookup: ScramLookup) -> None:
        self._exchange = scram.ScramExchange(mechanism, lookup)
        self._mechanism = mechanism

    @property
    def done(self) -> bool:
        return self._exchange.done

    def step(self, token: bytes) -> bytes:
        try:
            return self._exchange.step(token)
        except scram.ScramFailure as exc:
            log.debug("SCRAM exchange failed: %s", exc)
            raise AuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self._mechanism}"
            ) from None

    @property
    def principal(self) -> str:
        return user(self._exchange.username)

    @property
    def expires_at_ms(self) -> int | None:
        return None


class OAuthBearerExchange:
    def __init__(self, validator: oauthbearer.TokenValidator) -> None:
        self._validator = validator
        self._token: oauthbearer.ValidatedToken | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("Authentication failed: unexpected message")
        try:
            self._token = self._validator.validate(oauthbearer.parse_initial_response(token))
        except oauthbearer.OAuthFailure as exc:
            raise AuthenticationFailed(f"Authentication failed: {exc}") from None
        self.done = True
        return b""

    @property
    def principal(self) -> str:
        assert self._token is not None
        return self._token.principal

    @property
    def expires_at_ms(self) -> int | None:
        return self._token.expires_at_ms if self._token is not None else None


# --- per listener -----------------------------------------------------------------------------


class SaslAuthenticator:
    """The mechanisms one listener offers and what each checks against."""

    def __init__(self, config: BrokerConfig, listener: str, scram_lookup: ScramLookup) -> None:
        enabled = config.listener_config(listener, "sasl.enabled.mechanisms")
        self.mechanisms = [m.strip().upper() for m in enabled.split(",") if m.strip()]
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if unknown:
            raise ValueError(
                f"listener {listener}: sasl.enabled.mechanisms {unknown} not supported "
                f"(supported: {', '.join(MECHANISMS)})"
            )
        if not self.mechanisms:
            raise ValueError(f"listener {listener}: sasl.enabled.mechanisms is empty")
        self._scram_lookup = scram_lookup
        self._plain_users: dict[str, str] = {}
        if "PLAIN" in self.mechanisms:
            jaas = jaas_for(config, listener, "plain")
            if jaas:
                self._plain_users = plain_users(parse_jaas(jaas))
        self._validator: oauthbearer.TokenValidator | None = None
        if "OAUTHBEARER" in self.mechanisms:

            def get(key: str) -> str:
                return config.listener_config(listener, key)

            url = get("sasl.oauthbearer.jwks.endpoint.url")
            if not url:
                raise ValueError(
                    f"listener {listener}: OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url"
                )
            try:
                self._validator = oauthbearer.TokenValidator(
                    url,
                    get("sasl.oauthbearer.expected.audience"),
                    get("sasl.oauthbearer.expected.issuer"),
                    get("sasl.oauthbearer.sub.claim.name"),
                    int(get("sasl.oauthbearer.clock.skew.seconds") or 30),
                )
            except (OSError, ValueError, Exception) as exc:
                raise ValueError(f"listener {listener}: cannot load the JWKS: {exc}") from None
        self.max_reauth_ms = int(config.listener_config(listener, "connections.max.reauth.ms") or 0)

    def exchange(self, mechanism: str) -> Exchange:
        if mechanism == "PLAIN":
            return PlainExchange(self._plain_users)
        if mechanism in scram.MECHANISMS:
            return ScramServerExchange(mechanism, self._scram_lookup)
        assert mechanism == "OAUTHBEARER" and self._validator is not None
        return OAuthBearerExchange(self._validator)


def jaas_for(config: BrokerConfig, listener: str, mechanism: str) -> str:
    """Kafka's lookup: listener.name.<l>.<mechanism>.sasl.jaas.config, then the listener's,
    then sasl.jaas.config."""
    for key in (f"{mechanism}.sasl.jaas.config", "sasl.jaas.config"):
        value = config.listener_config(listener, key)
        if value:
            return value
    return ""


# --- per connection ---------------------------------------------------------------------------


class CloseConnection(Exception):
    """The connection must be closed without an answer (a protocol violation)."""


class SaslSession:
    """The SASL state of one connection."""

    def __init__(
        self, authenticator: SaslAuthenticator, clock: Callable[[], float] = time.monotonic
    ):
        self._auth = authenticator
        self._clock = clock
        self.mechanism: str | None = None
        self._exchange: Exchange | None = None
        self.principal: str | None = None  # set once authenticated
        self.expires_at: float | None = None  # clock time the session ends (KIP-368)
        # After SaslHandshake v0 the client sends bare SASL tokens, each only length-prefixed
        # (no Kafka request header), until the exchange ends.
        self.raw_tokens = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self) -> bool:
        return self.expires_at is not None and self._clock() >= self.expires_at

    @property
    def in_exchange(self) -> bool:
        """A (re-)authentication exchange has started and not ended."""
        return self._exchange is not None

    def handshake(self, version: int, mechanism: str) -> dict[str, Any]:
        if self._exchange is not None:
            # A second handshake in the middle of an exchange.
            raise CloseConnection("SaslHandshake during a SASL exchange")
        if self.authenticated and (version < 1 or self.expires_at is None):
            # Re-authentication (KIP-368) is for v1+ clients of a session with a lifetime.
            raise CloseConnection("SaslHandshake on an authenticated connection")
        enabled = self._auth.mechanisms
        if mechanism not in enabled:
            return {
                "error_code": int(ErrorCode.unsupported_sasl_mechanism),
                "mechanisms": enabled,
            }
        if self.authenticated and mechanism != self.mechanism:
            raise CloseConnection("re-authentication must use the same SASL mechanism")
        self.mechanism = mechanism
        self._exchange = self._auth.exchange(mechanism)
        self.raw_tokens = version == 0
        return {"error_code": 0, "mechanisms": enabled}

    def authenticate_raw(self, token: bytes) -> bytes:
        """One bare token after SaslHandshake v0: the bare answer. A failure raises
        AuthenticationFailed: v0 has no way to carry an error, so Kafka just closes."""
        if self._exchange is None:
            raise AuthenticationFailed("unexpected SASL token")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed("SASL token too large")
        challenge = self._exchange.step(token)
        if self._exchange.done:
            self.principal = self._exchange.principal
            lifetime_ms = self._lifetime_ms(self._exchange.expires_at_ms)
            self.expires_at = None if lifetime_ms is None else self._clock() + lifetime_ms / 1000
            self._exchange = None
            self.raw_tokens = False
        return challenge

    def authenticate(self, version: int, token: bytes) -> tuple[dict[str, Any], bool]:
        """The SaslAuthenticate answer, and whether to close the connection after it."""
        if self._exchange is None:
            return (
                _failure(
                    ErrorCode.illegal_sasl_state,
                    "SaslAuthenticate without a SaslHandshake before it",
                ),
                True,
            )
        if len(token) > MAX_TOKEN_BYTES:
            self._exchange = None
            return _failure(ErrorCode.sasl_authentication_failed, "SASL token too large"), True
        try:
            challenge = self._exchange.step(bytes(token))
        except AuthenticationFailed as exc:
            self._exchange = None
            return _failure(ErrorCode.sasl_authentication_failed, str(exc)), True
        answer: dict[str, Any] = {"error_code": 0, "auth_bytes": challenge}
        if not self._exchange.done:
            return answer, False
        principal = self._exchange.principal
        if self.authenticated and principal != self.principal:
            self._exchange = None
            return (
                _failure(
                    ErrorCode.sasl_authentication_failed,
                    "Cannot change principals during re-authentication",
                ),
                True,
            )
        lifetime_ms = self._lifetime_ms(self._exchange.expires_at_ms)
        self._exchange = None
        self.principal = principal
        self.expires_at = None if lifetime_ms is None else self._clock() + lifetime_ms / 1000
        if version >= 1:
            answer["session_lifetime"] = lifetime_ms or 0
        return answer, False

    def _lifetime_ms(self, credential_expires_at_ms: int | None) -> int | None:
        """The session's lifetime, None for unlimited."""
        # As Kafka: sessions end only with connections.max.reauth.ms set; then no later than
        # the credential (an OAUTHBEARER token) expires.
        if self._auth.max_reauth_ms <= 0:
            return None
        limits = [self._auth.max_reauth_ms]
        if credential_expires_at_ms is not None:
            limits.append(max(credential_expires_at_ms - oauthbearer.now_ms(), 0))
        return min(limits) if limits else None


def _failure(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message, "auth_bytes": b""}
