"""What ``sluice cluster up --secure`` generates: a private CA, certificates for the brokers'
SASL_SSL listeners and the controllers' HTTPS API (and client certificates the brokers
present to the controllers), a SCRAM-SHA-512 admin user, and the SCRAM-SHA-512 user the
brokers log in as on each other's listener (followers replicating classic topics); the brokers
run Kafka's StandardAuthorizer with those two as super users.

Everything lives under ``<dir>/tls`` with private keys and the password readable by the owner
only, except the CA's private key: it is in ``<dir>/tls-ca/`` so that mounting or copying the
``tls`` directory (docker-compose.secure.yml) never hands it to a container; whoever has it can
issue certificates the whole cluster trusts. The admin credential goes into the metadata log
as salted keys before any broker starts, so the cluster never has an unauthenticated moment.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "admin"
ADMIN_MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"  # the brokers' own principal on the inter-broker listener
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class SecureFiles:
    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root.parent / f"{self.root.name}-ca" / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.root / "broker-client.pem"

    @property
    def client_key(self) -> Path:
        return self.root / "broker-client.key"

    @property
    def admin_password_file(self) -> Path:
        return self.root / "admin.password"

    @property
    def broker_password_file(self) -> Path:
        return self.root / "broker.password"

    @property
    def broker_jaas_file(self) -> Path:
        return self.root / "broker.jaas"

    def broker_password(self) -> str:
        return self.broker_password_file.read_text().strip()

    @property
    def client_properties(self) -> Path:
        return self.root / "client.properties"

    def admin_password(self) -> str:
        return self.admin_password_file.read_text().strip()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sluice local cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def generate(root: Path, hosts: list[str]) -> SecureFiles:
    """A CA, a server certificate for ``hosts`` and a broker client certificate; reused if
    they exist (a second ``up`` keeps the clients' trust and the admin password)."""
    files = SecureFiles(root)
    old_ca_key = root / "ca.key"  # where older versions kept it
    if old_ca_key.exists():
        files.ca_key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.replace(old_ca_key, files.ca_key)
    if files.ca.exists() and files.admin_password_file.exists():
        if not files.broker_password_file.exists():  # made by an older version
            _write_broker_login(files)
        return files
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = _name("sluice local CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(
        common_name: str, usage: x509.ObjectIdentifier, sans: list[str]
    ) -> tuple[bytes, bytes]:
        key = _key()
        names: list[x509.GeneralName] = []
        for host in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    server_cert, server_key = issue(
        "sluice", ExtendedKeyUsageOID.SERVER_AUTH, sorted({*hosts, "127.0.0.1", "localhost"})
    )
    client_cert, client_key = issue("sluice-broker", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.ca_key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_private(files.ca_key, _pem_key(ca_key))
    files.server_cert.write_bytes(server_cert)
    _write_private(files.server_key, server_key)
    files.client_cert.write_bytes(client_cert)
    _write_private(files.client_key, client_key)
    _write_private(files.admin_password_file, (secrets.token_urlsafe(18) + "\n").encode())
    _write_broker_login(files)
    return files


def _write_broker_login(files: SecureFiles) -> None:
    """The brokers' password, and their JAAS line in a file of its own so that a deployment
    passes it as ``sasl.jaas.config=${file:...}`` (docker-compose.secure.yml)."""
    _write_private(files.broker_password_file, (secrets.token_urlsafe(18) + "\n").encode())
    _write_private(files.broker_jaas_file, (broker_jaas(files) + "\n").encode())


def write_client_properties(files: SecureFiles, bootstrap: str) -> None:
    """Settings a librdkafka client (kcat -F, confluent-kafka) needs to log in as admin."""
    text = (
        f"bootstrap.servers={bootstrap}\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanisms={ADMIN_MECHANISM}\n"
        f"sasl.username={ADMIN_USER}\n"
        f"sasl.password={files.admin_password()}\n"
        f"ssl.ca.location={files.ca}\n"
    )
    _write_private(files.client_properties, text.encode())


def broker_jaas(files: SecureFiles) -> str:
    password = files.broker_password().replace("\\", "\\\\").replace('"', '\\"')
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{BROKER_USER}" password="{password}";'
    )


def broker_settings(files: SecureFiles, host: str, port: int) -> dict[str, str]:
    return {
        "listeners": f"SASL_SSL://{host}:{port}",
        "ssl.certificate.location": str(files.server_cert),
        "ssl.key.location": str(files.server_key),
        # Followers check their leader's certificate against the cluster's CA.
        "ssl.ca.location": str(files.ca),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": ADMIN_MECHANISM,
        f"listener.name.sasl_ssl.{ADMIN_MECHANISM.lower()}.sasl.jaas.config": broker_jaas(files),
        # ACLs decide, as Kafka's StandardAuthorizer (a resource without any is closed):
        # replication is the broker principal's privilege (CLUSTER_ACTION), administration
        # admin's. Another SCRAM user may do only what admin grants it, so it cannot, e.g.,
        # overwrite admin's credential (ALTER on the cluster).
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}",
        "controller.ssl.ca.location": str(files.ca),
        "controller.ssl.certificate.location": str(files.client_cert),
        "controller.ssl.key.location": str(files.client_key),
    }


def controller_settings(files: SecureFiles) -> dict[str, str]:
    return {
        "ssl.certificate.location": str(files.server_cert),
        "ssl.key.location": str(files.server_key),
        "ssl.ca.location": str(files.ca),
        "ssl.client.auth": "required",
    }


async def create_admin(files: SecureFiles, controllers: list[str], secret: str) -> None:
    """The admin's SCRAM credential, written to the metadata log through the controllers'
    API (salted keys only), before any broker starts."""
    from broker.metadata.controller_client import ControllerClient, client_ssl_context
    from broker.security.scram import credential_from_password
    from controller.requests import ScramUpsertion

    upserts = []
    for name, password in ((ADMIN_USER, files.admin_password()), (BROKER_USER, None)):
        if password is None:
            if not files.broker_password_file.exists():
                continue
            password = files.broker_password()
        credential = credential_from_password(ADMIN_MECHANISM, password, 8192)
        upserts.append(
            ScramUpsertion(
                name,
                ADMIN_MECHANISM,
                credential.salt,
                credential.stored_key,
                credential.server_key,
                credential.iterations,
            )
        )
    client = ControllerClient(
        controllers,
        secret,
        ssl_context=client_ssl_context(
            str(files.ca), str(files.client_cert), str(files.client_key)
        ),
        deadline=30,
    )
    try:
        results, _ = await client.alter_scram_credentials([], upserts)
    finally:
        await client.close()
    for result in results:
        if result.error_code != 0:
            raise RuntimeError(f"creating the admin user: {result.error_message}")


def main(argv: list[str] | None = None) -> int:
    """``python -m sluice.secure certs DIR --hosts ...`` makes the CA, certificates and admin
    password of a deployment (docker-compose.secure.yml); ``admin DIR --controllers ...
    --secret ...`` writes the admin's SCRAM credential through the controllers' API."""
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(prog="python -m sluice.secure")
    sub = parser.add_subparsers(dest="action", required=True)
    certs = sub.add_parser("certs", help="generate the CA, certificates and admin password")
    certs.add_argument("dir")
    certs.add_argument("--hosts", default="", help="server names and IPs, comma separated")
    admin = sub.add_parser("admin", help="create the SCRAM-SHA-512 user 'admin'")
    admin.add_argument("dir")
    admin.add_argument("--controllers", required=True, help="https://host:port,...")
    admin.add_argument("--secret", default=os.environ.get("SLUICE_CONTROLLER_SECRET", ""))
    args = parser.parse_args(argv)
    if args.action == "certs":
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        files = generate(Path(args.dir), hosts)
        print(f"CA {files.ca}; admin password in {files.admin_password_file}")
        return 0
    from common.secret_reference import resolve_secret_reference

    files = SecureFiles(Path(args.dir))
    # ${file:/run/...} in docker-compose.secure.yml: the secret is not on the command line.
    secret = resolve_secret_reference("controller.secret", args.secret)
    asyncio.run(create_admin(files, args.controllers.split(","), secret))
    print("SCRAM-SHA-512 users 'admin' and 'broker' created")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
