"""Brokers register every advertised listener; Metadata answers each client with the
addresses of the listener it came in on; credentials ride the metadata log and snapshots."""

from __future__ import annotations

import uuid

from broker.metadata.membership import BrokerEndpoint
from controller.image import MetadataImage
from controller.records import decode_batch, encode_batch
from controller.requests import BrokerRegistrationRequest, ScramDeletion, ScramUpsertion
from controller.scram_admin import alter_scram_credentials
from tests.unit.controller.harness import Cluster

LISTENERS = ("SASL_SSL://kafka-1.example.com:9093", "INTERNAL://10.0.0.5:9094")


def test_registration_carries_listeners_and_an_amended_registration_updates_them() -> None:
    c = Cluster()
    incarnation = uuid.uuid4()
    request = BrokerRegistrationRequest(1, incarnation, "10.0.0.5", 9094, None, None, LISTENERS)
    epoch = c.commit(c.logic.register_broker(c.image, request, c.now)).broker_epoch
    assert c.image.brokers[1].listeners == LISTENERS
    # The same process registering again with another listener set: amended, same epoch.
    again = BrokerRegistrationRequest(1, incarnation, "10.0.0.5", 9094, None, None, LISTENERS[:1])
    assert c.commit(c.logic.register_broker(c.image, again, c.now)).broker_epoch == epoch
    assert c.image.brokers[1].listeners == LISTENERS[:1]
    # Snapshots keep them.
    rebuilt = MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot())))
    assert rebuilt == c.image and rebuilt.brokers[1].listeners == LISTENERS[:1]


def test_endpoint_on_the_clients_listener() -> None:
    b = BrokerEndpoint(1, "10.0.0.5", 9094, "az-a", LISTENERS)
    assert b.on_listener("SASL_SSL") == BrokerEndpoint(1, "kafka-1.example.com", 9093, "az-a")
    assert b.on_listener("INTERNAL") == BrokerEndpoint(1, "10.0.0.5", 9094, "az-a")
    # A listener the broker does not advertise: its inter-broker address.
    assert b.on_listener("PLAINTEXT") is b
    v6 = BrokerEndpoint(2, "h", 1, None, ("SSL://[::1]:9093",))
    assert (v6.on_listener("SSL").host, v6.on_listener("SSL").port) == ("::1", 9093)


def test_scram_credentials_in_the_image_and_its_snapshot() -> None:
    c = Cluster()
    up = ScramUpsertion("alice", "SCRAM-SHA-512", b"salt", b"stored", b"server", 8192)
    results = c.commit(alter_scram_credentials(c.image, [], [up]))
    assert [int(r.error_code) for r in results] == [0]
    entry = c.image.scram_credentials[("alice", "SCRAM-SHA-512")]
    assert (entry.salt, entry.stored_key, entry.server_key, entry.iterations) == (
        b"salt",
        b"stored",
        b"server",
        8192,
    )
    rebuilt = MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot())))
    assert rebuilt.scram_credentials == c.image.scram_credentials
    # Kafka's per-user rules: a user named twice is refused whole, nothing is written.
    twice = alter_scram_credentials(c.image, [ScramDeletion("alice", "SCRAM-SHA-512")], [up])
    assert twice.records == [] and [int(r.error_code) for r in twice.response] == [92]
    c.commit(alter_scram_credentials(c.image, [ScramDeletion("alice", "SCRAM-SHA-512")], []))
    assert c.image.scram_credentials == {}
