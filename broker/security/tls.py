"""TLS for SSL and SASL_SSL listeners: the server context, and the principal of a client
certificate.

Settings are Kafka's (librdkafka's spelling for the PEM files): ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``, ``ssl.ca.location`` and ``ssl.client.auth``,
each also settable per listener as ``listener.name.<listener>.ssl.*``.
"""

from __future__ import annotations

import ssl

from cryptography import x509

from broker.config import BrokerConfig
from broker.security.principal import ANONYMOUS, user

# A client that connects to a TLS port and sends nothing, or plaintext Kafka bytes that
# happen not to fail the handshake at once, is dropped after this long instead of holding a
# connection open forever.
HANDSHAKE_TIMEOUT_S = 10.0

_CLIENT_AUTH = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of one listener; raises ValueError naming what is missing."""

    def get(key: str) -> str:
        return config.listener_config(listener, key).strip()

    cert, key = get("ssl.certificate.location"), get("ssl.key.location")
    if not cert:
        raise ValueError(f"listener {listener} uses TLS: set ssl.certificate.location")
    client_auth = get("ssl.client.auth") or "none"
    if client_auth not in _CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth must be required, requested or none: {client_auth!r}")
    ca = get("ssl.ca.location")
    if client_auth != "none" and not ca:
        raise ValueError(
            f"listener {listener}: ssl.client.auth={client_auth} needs ssl.ca.location"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # TLS 1.2 is Kafka's oldest default (ssl.enabled.protocols=TLSv1.2,TLSv1.3).
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None, password=get("ssl.key.password") or None)
        if ca:
            context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        # The message names the file, never the key password.
        raise ValueError(f"listener {listener}: cannot load TLS files: {exc}") from None
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def certificate_principal(der: bytes | None) -> str:
    """``User:`` + the subject DN in RFC 2253 form (most specific RDN first, e.g.
    ``User:CN=alice,OU=eng,O=example``), as Kafka's default principal builder makes it;
    ANONYMOUS without a client certificate."""
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject
    # RFC 4514 obsoletes RFC 2253 and writes DNs the same way (reverse RDN order, the same
    # escapes), which is what Java's X500Principal.getName(RFC2253) gives Kafka.
    return user(subject.rfc4514_string())
