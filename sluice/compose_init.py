"""What the one-shot init services of docker-compose.yml run (``python -m sluice.compose_init``).

``secrets``: the deployment's generated credentials, so that no compose file ships a password.
Each audience gets a directory of its own (a named volume mounted only where it is needed):

    controller/secret    controller.secret (controllers, brokers, scram-admin)
    postgres/password    the PostgreSQL password (postgres: POSTGRES_PASSWORD_FILE)
    postgres/dsn         the brokers' coordinator.dsn, which embeds that password
    minio/password       MinIO's root password (MINIO_ROOT_PASSWORD_FILE, the brokers'
                         s3.secret.key, minio-init)
    grafana/password     Grafana's admin password (GF_SECURITY_ADMIN_PASSWORD__FILE)

A file that exists is kept: PostgreSQL and MinIO take their password from it only when their
data volume is first initialised, so a new one on a later ``up`` would lock everybody out.

``tls SRC NODE ADMIN``: copies what ``python -m sluice.secure certs SRC`` generated on the
host into the volumes the containers mount, owned by the user the container runs as (a bind
mount keeps the host's owner, and a 0600 key owned by the host user cannot be read by the
image's ``sluice`` user). NODE (brokers, controllers) gets the CA certificate, the server and
client certificates and keys and the brokers' JAAS line; ADMIN (scram-admin) also gets the
two SCRAM passwords. The CA's private key is never in SRC (see sluice.secure) and never copied.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
from pathlib import Path

# The image's users: deploy/Dockerfile's `useradd --uid`, the grafana/grafana image's user.
SLUICE_UID = 10001
GRAFANA_UID = 472
PROMETHEUS_UID = 65534  # prom/prometheus runs as nobody

POSTGRES_USER = "sluice"
POSTGRES_DB = "sluice"
POSTGRES_HOST = "postgres:5432"

# sluice.secure's file names, by audience.
NODE_FILES = (
    "ca.pem",
    "server.pem",
    "server.key",
    "broker-client.pem",
    "broker-client.key",
    "broker.jaas",
)
ADMIN_FILES = (*NODE_FILES, "admin.password", "broker.password")


def _write(path: Path, text: str, uid: int | None) -> None:
    """0600 from the start, then renamed into place: a reader never sees half a secret."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    if uid is not None:
        os.chown(tmp, uid, uid)
    os.replace(tmp, path)


def _keep_or_make(path: Path, make: str, uid: int | None) -> str:
    if path.exists():
        if uid is not None:  # a volume made by an older init, or restored as root
            os.chown(path, uid, uid)
        os.chmod(path, 0o600)
        return path.read_text().rstrip("\r\n")
    _write(path, make, uid)
    return make


def postgres_dsn(password: str) -> str:
    return f"postgresql://{POSTGRES_USER}:{password}@{POSTGRES_HOST}/{POSTGRES_DB}"


def make_secrets(root: Path, *, chown: bool = True) -> None:
    """Create every missing secret under ``root``/<audience>/ (see the module docstring).

    Hex and URL-safe alphabets only: the PostgreSQL password goes into a DSN unquoted."""
    sluice_uid = SLUICE_UID if chown else None
    grafana_uid = GRAFANA_UID if chown else None
    prometheus_uid = PROMETHEUS_UID if chown else None
    for audience in ("controller", "postgres", "minio", "grafana", "prometheus"):
        (root / audience).mkdir(parents=True, exist_ok=True)
    controller = _keep_or_make(
        root / "controller" / "secret", secrets.token_urlsafe(32), sluice_uid
    )
    # Prometheus scrapes the controllers' /metrics (it names every topic: behind the
    # secret) as a bearer token, from its own copy owned by its image's user.
    scrape = root / "prometheus" / "controller-secret"
    if not scrape.exists() or scrape.read_text().rstrip("\r\n") != controller:
        _write(scrape, controller, prometheus_uid)
    # PostgreSQL's and MinIO's entrypoints read their file as root before dropping privileges.
    password = _keep_or_make(root / "postgres" / "password", secrets.token_hex(24), sluice_uid)
    dsn = root / "postgres" / "dsn"
    if not dsn.exists() or dsn.read_text().rstrip("\r\n") != postgres_dsn(password):
        _write(dsn, postgres_dsn(password), sluice_uid)
    _keep_or_make(root / "minio" / "password", secrets.token_hex(24), sluice_uid)
    _keep_or_make(root / "grafana" / "password", secrets.token_urlsafe(18), grafana_uid)


def install_tls(src: Path, node: Path, admin: Path, *, chown: bool = True) -> None:
    """Copy sluice.secure's files into NODE and ADMIN, owned by the sluice user."""
    missing = [name for name in ADMIN_FILES if not (src / name).is_file()]
    if missing:
        raise SystemExit(
            f"{src}: {', '.join(missing)} missing; run `python -m sluice.secure certs "
            "deploy/tls --hosts ...` first (docs/operations.md, Run with docker-compose)"
        )
    for target, names in ((node, NODE_FILES), (admin, ADMIN_FILES)):
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            tmp = target / (name + ".tmp")
            shutil.copyfile(src / name, tmp)
            private = name.endswith((".key", ".password", ".jaas"))
            os.chmod(tmp, 0o600 if private else 0o644)
            if chown:
                os.chown(tmp, SLUICE_UID, SLUICE_UID)
            os.replace(tmp, target / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.compose_init")
    sub = parser.add_subparsers(dest="action", required=True)
    make = sub.add_parser("secrets", help="generate the deployment's missing credentials")
    make.add_argument("dir")
    tls = sub.add_parser("tls", help="install sluice.secure's files for the containers")
    tls.add_argument("src")
    tls.add_argument("node")
    tls.add_argument("admin")
    args = parser.parse_args(argv)
    # Ownership can only be given away by root (the init services run as root).
    chown = os.geteuid() == 0
    if args.action == "secrets":
        make_secrets(Path(args.dir), chown=chown)
        print(f"secrets in {args.dir}: controller, postgres, minio, grafana")
    else:
        install_tls(Path(args.src), Path(args.node), Path(args.admin), chown=chown)
        print(f"TLS files installed in {args.node} and {args.admin} (no CA key)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
