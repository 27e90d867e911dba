"""How this broker connects to other brokers: the security of ``inter.broker.listener.name``.

A follower fetches from its leader (and the transaction coordinator writes markers) on the
leader's inter-broker listener, so this broker is a client of that listener's protocol:

- TLS (SSL, SASL_SSL): the server certificate is checked against ``ssl.ca.location`` (the
  system's CAs without one) and, with ``ssl.endpoint.identification.algorithm=https`` (Kafka's
  default), its host name; the broker's own certificate (``ssl.certificate.location``) is
  presented, so an ``ssl.client.auth=required`` listener sees the broker's identity (mTLS).
- SASL (SASL_PLAINTEXT, SASL_SSL): ``sasl.mechanism.inter.broker.protocol`` (PLAIN or
  SCRAM-SHA-256/512) with ``username``/``password`` from the listener's JAAS config.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.security.listeners import ListenerPlan, SecurityProtocol
from broker.security.sasl import jaas_for, parse_jaas
from broker.security.sasl_client import CLIENT_MECHANISMS, SaslCredentials


@dataclass(frozen=True)
class InterBrokerSecurity:
    listener: str
    protocol: SecurityProtocol
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


PLAINTEXT = InterBrokerSecurity("PLAINTEXT", SecurityProtocol.PLAINTEXT)


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS client context for another broker's ``listener``; raises ValueError."""

    def get(key: str) -> str:
        return config.listener_config(listener, key).strip()

    ca = get("ssl.ca.location")
    try:
        context = ssl.create_default_context(cafile=ca or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        algorithm = get("ssl.endpoint.identification.algorithm").lower()
        if algorithm not in ("https", ""):
            raise ValueError(
                f"ssl.endpoint.identification.algorithm must be https or empty: {algorithm!r}"
            )
        # Kafka's empty value turns host name checks off; the chain is still verified.
        context.check_hostname = algorithm == "https"
        cert = get("ssl.certificate.location")
        if cert:
            key = get("ssl.key.location") or None
            context.load_cert_chain(cert, key, password=get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"listener {listener}: cannot load TLS files: {exc}") from None
    return context


def credentials(config: BrokerConfig, listener: str) -> SaslCredentials:
    """The SASL mechanism and login this broker uses on ``listener``; raises ValueError."""
    mechanism = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    if not mechanism:
        raise ValueError(
            f"inter-broker listener {listener} uses SASL: set sasl.mechanism.inter.broker.protocol"
        )
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(
            f"sasl.mechanism.inter.broker.protocol {mechanism} is not supported between brokers "
            f"(supported: {', '.join(CLIENT_MECHANISMS)})"
        )
    enabled = config.listener_config(listener, "sasl.enabled.mechanisms")
    if mechanism not in {m.strip().upper() for m in enabled.split(",")}:
        raise ValueError(
            f"sasl.mechanism.inter.broker.protocol {mechanism} is not in listener {listener}'s "
            "sasl.enabled.mechanisms"
        )
    jaas = jaas_for(config, listener, mechanism.lower())
    options = parse_jaas(jaas).options if jaas else {}
    username, password = options.get("username", ""), options.get("password", "")
    if not username or not password:
        raise ValueError(
            f"inter-broker listener {listener}: the {mechanism} JAAS config "
            f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config) needs "
            "username= and password="
        )
    return SaslCredentials(mechanism, username, password)


def inter_broker_security(config: BrokerConfig, plan: ListenerPlan) -> InterBrokerSecurity:
    """What connecting to another broker's inter-broker listener takes; raises ValueError."""
    listener = plan.inter_broker
    protocol = plan.protocol(listener)
    context = client_context(config, listener) if protocol.tls else None
    sasl = credentials(config, listener) if protocol.sasl else None
    return InterBrokerSecurity(listener, protocol, context, sasl)
