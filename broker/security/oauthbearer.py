"""OAUTHBEARER (RFC 7628, Kafka's KIP-255/768): the client sends a JWT; the broker checks its
signature against a JWKS, its expiry, and optionally its audience and issuer.

Settings are Kafka's: ``sasl.oauthbearer.jwks.endpoint.url`` (a ``file://`` URL here: the
broker never fetches keys over the network at authentication time),
``sasl.oauthbearer.expected.audience``, ``sasl.oauthbearer.expected.issuer``,
``sasl.oauthbearer.sub.claim.name`` and ``sasl.oauthbearer.clock.skew.seconds``. The principal
is ``User:`` + the subject claim. The JWKS file is re-read when it changes, so keys rotate
without a restart.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import jwt

from broker.security.principal import user

# Asymmetric algorithms only: with a JWKS, an HMAC ("HS256") token would be checked with a
# public key as the shared secret, the classic algorithm-confusion hole.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]


class OAuthFailure(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal: str
    expires_at_ms: int


def jwks_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url must be a file:// URL, not {url!r}")
    return unquote(parts.path)


class TokenValidator:
    def __init__(
        self,
        jwks_url: str,
        audience: str = "",
        issuer: str = "",
        sub_claim: str = "sub",
        clock_skew_s: int = 30,
    ) -> None:
        self._path = jwks_path(jwks_url)
        self._audience = [a.strip() for a in audience.split(",") if a.strip()]
        self._issuer = issuer.strip()
        self._sub_claim = sub_claim or "sub"
        self._skew = clock_skew_s
        self._keys: jwt.PyJWKSet | None = None
        self._loaded_mtime: float | None = None
        self._keyset()  # fail at start on a missing or malformed JWKS

    def _keyset(self) -> jwt.PyJWKSet:
        mtime = os.stat(self._path).st_mtime
        if self._keys is None or mtime != self._loaded_mtime:
            with open(self._path) as f:
                self._keys = jwt.PyJWKSet.from_json(f.read())
            self._loaded_mtime = mtime
        return self._keys

    def validate(self, token: str) -> ValidatedToken:
        try:
            header = jwt.get_unverified_header(token)
            keys = self._keyset()
            kid = header.get("kid")
            if kid is not None:
                key = keys[kid]
            elif len(keys.keys) == 1:
                key = keys.keys[0]
            else:
                raise OAuthFailure("the token names no key id (kid) and the JWKS has several")
            claims = jwt.decode(
                token,
                key=key,
                algorithms=ALGORITHMS,
                audience=self._audience or None,
                issuer=self._issuer or None,
                leeway=self._skew,
                options={"require": ["exp"], "verify_aud": bool(self._audience)},
            )
        except OAuthFailure:
            raise
        except (jwt.PyJWTError, KeyError) as exc:
            raise OAuthFailure(f"invalid token: {exc}") from None
        except OSError as exc:
            raise OAuthFailure(f"the JWKS cannot be read: {exc.strerror}") from None
        subject = claims.get(self._sub_claim)
        if not isinstance(subject, str) or not subject:
            raise OAuthFailure(f"the token has no {self._sub_claim!r} claim")
        return ValidatedToken(user(subject), int(claims["exp"]) * 1000)


def parse_initial_response(message: bytes) -> str:
    """The bearer token of an RFC 7628 client initial response:
    ``gs2-header \\x01 auth=Bearer <token> \\x01 [key=value \\x01]* \\x01``."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise OAuthFailure("not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
        raise OAuthFailure("malformed OAUTHBEARER message")
    for pair in rest[:-2].split("\x01"):
        key, _, value = pair.partition("=")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise OAuthFailure("expected auth=Bearer <token>")
            return token.strip()
    raise OAuthFailure("no auth=Bearer in the OAUTHBEARER message")


def now_ms() -> int:
    return int(time.time() * 1000)
