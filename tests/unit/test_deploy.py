"""docker-compose.yml and deploy/, validated without a Docker daemon.

Structure (services, racks, ports, env naming), the Prometheus targets, the Grafana dashboard
and its metric names are checked here with PyYAML; the compose schema itself is checked by
``docker-compose config -q`` (Debian's docker-compose, which scripts/test installs) or
``docker compose config -q``: neither needs a daemon.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from broker.config import load_config, parse_config_file
from broker.server.metrics import METRICS
from controller.access import secret_problem
from controller.config import load_settings
from controller.service import ControllerService
from sluice.compose_init import (
    ADMIN_FILES,
    GRAFANA_UID,
    NODE_FILES,
    SLUICE_UID,
    install_tls,
    make_secrets,
)
from sluice.secure import generate
from tests.fixtures.controller_settings import single_voter

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
BROKERS = [f"broker{i}" for i in range(1, 7)]
CONTROLLERS = [f"controller{i}" for i in range(1, 4)]
RACKS = {"az-a", "az-b", "az-c"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _substitute(value: str) -> str:
    """Compose's ${VAR:-default} with the variable unset, and its ``$$`` escape (a literal
    ``$``, as in ``$${file:/run/sluice/...}``) undone."""
    value = re.sub(r"(?<!\$)\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    return value.replace("$$", "$")


@dataclass(frozen=True)
class Generated:
    """What the init services generate, made by the same code in a temp directory."""

    secrets: Path  # secrets-init's /run/sluice
    tls: Path  # the host's deploy/tls (python -m sluice.secure certs)
    node: Path  # tls-init's tls-node volume (/etc/sluice/tls)
    admin: Path  # tls-init's tls-admin volume (/etc/sluice/admin)

    def resolve(self, value: str) -> str:
        """A compose value as the container sees it, its in-container paths moved here."""
        value = _substitute(value)
        value = value.replace("${file:/run/sluice/", f"${{file:{self.secrets}/")
        return value.replace("${file:/etc/sluice/tls/", f"${{file:{self.node}/")

    def env(self, service: dict) -> dict[str, str]:
        return {k: self.resolve(v) for k, v in _env(service).items()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    root = tmp_path_factory.mktemp("compose-init")
    out = Generated(root / "run-sluice", root / "tls", root / "node", root / "admin")
    make_secrets(out.secrets, chown=False)
    generate(out.tls, [*BROKERS, *CONTROLLERS, "localhost"])
    install_tls(out.tls, out.node, out.admin, chown=False)
    return out


def _mounted_config(service: dict) -> Path:
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if target == service["command"][-1]:
            return ROOT / source
    raise AssertionError(f"the config file {service['command'][-1]} is not mounted")


def _bindings(service: dict) -> list[tuple[str, int]]:
    """(host interface, host port) of each published port; "" is every interface. Short
    syntax ("[ip:]host:container", docker-compose.yml) or Compose's own output (mappings)."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append((port.get("host_ip", ""), int(port["published"])))
            continue
        parts = str(port).split("/")[0].split(":")
        assert len(parts) in (2, 3), f"{port!r}: publish with an explicit host port"
        out.append((parts[0] if len(parts) == 3 else "", int(parts[-2])))
    return out


def _published(service: dict) -> list[int]:
    return [port for _host, port in _bindings(service)]


def test_services_exist(compose: dict) -> None:
    services = compose["services"]
    for name in ["minio", "minio-init", "postgres", "prometheus", "grafana", *CONTROLLERS]:
        assert name in services, name
    assert sorted(n for n in services if n.startswith("broker")) == BROKERS


def test_brokers_two_per_rack_and_name_the_controllers(compose: dict) -> None:
    services = compose["services"]
    racks: dict[str, int] = {}
    node_ids = set()
    for name in BROKERS:
        service = services[name]
        env = _env(service)
        rack = env["SLUICE_BROKER_RACK"]
        racks[rack] = racks.get(rack, 0) + 1
        node_ids.add(env["SLUICE_NODE_ID"])
        bootstrap = env["SLUICE_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"].split(",")
        assert sorted(b.split(":")[0] for b in bootstrap) == CONTROLLERS
        assert all(b.endswith(":9094") for b in bootstrap)
        assert service["command"][:2] == ["broker", "--config"]
        # One listener: the published port equals the port the broker listens on and
        # advertises, so localhost:<port> from the host reaches this broker.
        assert _published(service) == [int(env["SLUICE_PORT"])]
        conditions = {k: v["condition"] for k, v in service["depends_on"].items()}
        assert conditions["postgres"] == "service_healthy"
        assert conditions["minio-init"] == "service_completed_successfully"
        assert all(conditions[c] == "service_healthy" for c in CONTROLLERS)
        assert "healthcheck" in service
    assert racks == dict.fromkeys(RACKS, 2)
    assert len(node_ids) == len(BROKERS)


def test_every_service_config_loads(compose: dict, generated: Generated) -> None:
    """Each broker's and controller's file + SLUICE_* env go through the real loaders, the
    ${file:...} references resolved against what secrets-init generates."""
    services = compose["services"]
    controller_secret = (generated.secrets / "controller" / "secret").read_text().strip()
    for name in BROKERS:
        service = services[name]
        file = parse_config_file(_mounted_config(service).read_text())
        env = generated.env(service)
        config = load_config(file, env=env)
        assert config.controller_secret == controller_secret
        assert config.s3_access_key == "sluice"
        minio_password = (generated.secrets / "minio" / "password").read_text().strip()
        assert config.s3_secret_key == minio_password
        pg_password = (generated.secrets / "postgres" / "password").read_text().strip()
        assert config.coordinator_dsn == f"postgresql://sluice:{pg_password}@postgres:5432/sluice"
        for mount in ("controller", "postgres", "minio"):
            assert f"secrets-{mount}:/run/sluice/{mount}:ro" in service["volumes"]
        assert config.rack == env["SLUICE_BROKER_RACK"]
        assert config.port == int(env["SLUICE_PORT"])
        assert config.http_port == 8080
        assert env["HEALTHCHECK_PORT"] == "8080"
        assert config.host == "0.0.0.0"
        assert config.object_store == "s3" and config.coordinator == "postgresql"
        assert "@postgres:5432/" in config.coordinator_dsn
        assert config.s3_endpoint == "http://minio:9000"
    voters = None
    for i, name in enumerate(CONTROLLERS, 1):
        service = services[name]
        assert service["command"][:2] == ["controller", "--config"]
        file = parse_config_file(_mounted_config(service).read_text())
        env = generated.env(service)
        settings = load_settings(file, env=env)
        assert settings.secret == controller_secret
        assert "secrets-controller:/run/sluice/controller:ro" in service["volumes"]
        assert settings.node_id == i
        assert settings.http_port == 9094 and env["HEALTHCHECK_PORT"] == "9094"
        assert {host for host, _port in settings.voters.values()} == set(CONTROLLERS)
        assert voters in (None, settings.voters)
        voters = settings.voters
        assert any(v.endswith(":/var/lib/sluice-controller") for v in service["volumes"])


def test_ports_do_not_collide(compose: dict) -> None:
    published = [p for service in compose["services"].values() for p in _published(service)]
    assert len(published) == len(set(published)), published


def test_storage_has_volumes_and_health_checks(compose: dict) -> None:
    services = compose["services"]
    named = set(compose["volumes"])
    for name, path in [("minio", "/data"), ("postgres", "/var/lib/postgresql/data")]:
        assert "healthcheck" in services[name]
        assert f"{name}-data:{path}" in services[name]["volumes"]
        assert f"{name}-data" in named
    init = services["minio-init"]
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"
    assert "mc mb" in " ".join(init["command"])
    broker_file = parse_config_file((DEPLOY / "config" / "broker.properties").read_text())
    assert f"local/{broker_file['s3.bucket']}" in " ".join(init["command"])


def test_prometheus_scrapes_every_broker_and_controller(compose: dict) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert targets == {f"{b}:8080" for b in BROKERS} | {f"{c}:9094" for c in CONTROLLERS}
    mount = "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
    assert mount in compose["services"]["prometheus"]["volumes"]


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def exported_series(tmp_path: Path) -> dict[str, str]:
    """Every series name the broker's and the controller's registries export -> its
    metric's name, from the registries themselves (the Kafka-named collectors included)."""
    controller = ControllerService(single_voter(tmp_path, secret="s"))
    out = {}
    for registry in (METRICS.registry, controller.registry):
        for family in registry.collect():
            for suffix in _SUFFIXES[family.type]:
                out[family.name + suffix] = family.name
    return out


def test_grafana_dashboard(compose: dict, tmp_path: Path) -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((provisioning / "dashboards" / "sluice.yml").read_text())
    (provider,) = providers["providers"]
    volumes = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in volumes

    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "sluice.json").read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exposed = exported_series(tmp_path)
    used = set()
    for panel in panels:
        assert panel["title"] and panel["targets"], panel
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        for target in panel["targets"]:
            assert target["refId"] and target["expr"]
            assert target["datasource"]["uid"] == source["uid"]
            for series in re.findall(r"\b(?:sluice|kafka)_\w+", target["expr"]):
                assert series in exposed, f"{panel['title']}: no metric {series}"
                used.add(exposed[series])
    required = {
        "sluice_client_az_requests",
        "kafka_server_diskless_transformer_fallback",
        "kafka_controller_diskless_effective_rf",
        "sluice_controller_under_replicated_partitions",
        "sluice_produced_bytes",
        "sluice_fetched_bytes",
        "sluice_client_bytes",
        "sluice_requests",
        "sluice_upload_seconds",
        "sluice_commit_seconds",
        "sluice_find_batches_seconds",
        # Kafka's names, as operators' dashboards read them (docs/operations.md).
        "kafka_controller_kafkacontroller_activecontrollercount",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_server_replicamanager_isrshrinks",
        "kafka_server_replicamanager_isrexpands",
        "kafka_server_brokertopicmetrics_messagesin",
        "kafka_server_brokertopicmetrics_bytesin",
        "kafka_server_brokertopicmetrics_bytesout",
        "kafka_network_requestmetrics_requests",
        "kafka_network_requestmetrics_totaltimems",
        "sluice_replica_follower_lag_messages",
        "sluice_replica_follower_lag_seconds",
        "kafka_consumergroup_lag",
        "kafka_server_replicamanager_partitioncount",
        "kafka_server_replicamanager_leadercount",
        "kafka_server_replicafetchermanager_maxlag",
        "kafka_controller_kafkacontroller_globalpartitioncount",
    }
    assert required <= used, required - used


def test_dockerfile() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim-bookworm" in text
    assert "pip install ." in text
    # pip compiles the record walker (protocol/_recwalk.c): setup.py and a compiler are needed.
    assert re.search(r"^COPY .*\bsetup\.py\b", text, re.M)
    assert re.search(r"apt-get install .*\bgcc\b", text)
    assert re.search(r"^USER (?!root)\w+", text, re.M)
    assert 'ENTRYPOINT ["sluice"]' in text
    assert "/readyz" in text and "HEALTHCHECK" in text
    for port in ("9092", "8080", "9093", "9094"):
        assert re.search(rf"^EXPOSE .*\b{port}\b", text, re.M), port


def _compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    raise AssertionError("docker-compose is not installed (scripts/test installs it with apt-get)")


def test_compose_config_validates() -> None:
    """The compose schema, anchors and interpolation, by Compose itself (no daemon needed)."""
    proc = subprocess.run(
        [*_compose_command(), "-f", str(COMPOSE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


SECURE = ROOT / "docker-compose.secure.yml"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def merged() -> dict:
    """docker-compose.secure.yml merged over docker-compose.yml by Compose itself."""
    proc = subprocess.run(
        [*_compose_command(), "-f", str(COMPOSE), "-f", str(SECURE), "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def test_secure_compose_override_validates_and_secures_every_broker(
    merged: dict, generated: Generated
) -> None:
    """Each broker's merged environment plus the shared properties is a broker config whose
    only listener is SASL_SSL on its published port, talking HTTPS to the controllers, with
    Kafka's StandardAuthorizer on and only the broker and admin principals exempt."""
    from broker.security.listeners import SecurityProtocol, listener_plan

    services = merged["services"]
    shared = parse_config_file((DEPLOY / "config" / "broker.properties").read_text())
    broker_password = (generated.tls / "broker.password").read_text().strip()
    for name in BROKERS:
        service = services[name]
        assert "scram-admin" in service["depends_on"]
        config = load_config(shared, env=generated.env(service))
        (listener,) = listener_plan(config).bound
        assert listener.protocol == SecurityProtocol.SASL_SSL
        assert [listener.port] == _published(service)
        assert all(s.startswith("https://") for s in config.controller_servers())
        assert config.authorizer_class_name == AUTHORIZER
        assert set(config.super_users.split(";")) == {"User:broker", "User:admin"}
        assert f'password="{broker_password}"' in config.sasl_jaas_config
    for name in CONTROLLERS:
        env = services[name]["environment"]
        assert env["SLUICE_SSL_CLIENT_AUTH"] == "required"
        assert services[name]["depends_on"]["tls-init"]["condition"] == (
            "service_completed_successfully"
        )


def test_secure_layout_publishes_only_the_kafka_listeners(merged: dict) -> None:
    """On every host interface only the brokers' SASL_SSL ports; Grafana on the host's
    loopback only, behind its generated admin password and without anonymous access;
    storage, controllers and Prometheus not at all."""
    services = merged["services"]
    listeners = {}
    for name in BROKERS:
        env = services[name]["environment"]
        (port,) = [int(p) for p in re.findall(r"SASL_SSL://:(\d+)", env["SLUICE_LISTENERS"])]
        listeners[name] = port
    for name, service in services.items():
        for host, port in _bindings(service):
            if name == "grafana":
                assert (host, port) == ("127.0.0.1", 3000)
                continue
            assert host in ("", "0.0.0.0"), (name, host)
            assert listeners.get(name) == port, f"{name} publishes {port}"
    for name in ("postgres", "minio", "prometheus", *CONTROLLERS):
        assert not services[name].get("ports"), name
    grafana = services["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/sluice/grafana/password"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana


def test_base_layout_publishes_kafka_and_loopback_grafana_only(compose: dict) -> None:
    """docker-compose.yml publishes nothing the secure layout could not keep: Compose
    concatenates `ports` when files are merged, so an override cannot withdraw one."""
    for name, service in compose["services"].items():
        for host, port in _bindings(service):
            if name in BROKERS:
                assert host == "" and port == int(_env(service)["SLUICE_PORT"])
            else:
                assert (name, host, port) == ("grafana", "127.0.0.1", 3000)


def _literal_secrets(services: dict) -> list[str]:
    """Secret-looking settings whose value is not a reference to a generated file."""
    found = []
    secretish = re.compile(r"PASSWORD|SECRET|DSN|JAAS|TOKEN")
    for name, service in services.items():
        for key, value in _env(service).items():
            if not secretish.search(key) or key.endswith(("_LOCATION", "ACCESS_KEY")):
                continue
            value = _substitute(value)
            if key.endswith("_FILE"):  # POSTGRES_PASSWORD_FILE, GF_..._PASSWORD__FILE
                ok = value.startswith("/run/sluice/")
            else:
                ok = re.fullmatch(r"\$\{file:/(run/sluice|etc/sluice/tls)/[\w/.-]+\}", value)
            if not ok:
                found.append(f"{name}: {key}={value}")
    return found


def test_no_password_is_written_in_the_compose_files(merged: dict) -> None:
    """Every password, secret, DSN and JAAS setting is a file that the init services
    generate, in both layouts; no well-known default is left anywhere in the text."""
    base = yaml.safe_load(COMPOSE.read_text())["services"]
    assert _literal_secrets(base) == []
    assert _literal_secrets(merged["services"]) == []
    for path in (COMPOSE, SECURE):
        text = path.read_text()
        for default in ("change-me", "sluice-secret", "sluice:sluice@", "admin/admin"):
            assert default not in text, (path.name, default)
        # Compose's ${VAR:-default} would make a shipped default again.
        assert not re.search(r"\$\{\w*(SECRET|PASSWORD)\w*:-", text), path.name
    # mc logs in with the generated password read from its file, never a literal.
    init = " ".join(base["minio-init"]["command"])
    assert "< /run/sluice/minio/password" in init and "mc alias set" not in init
    assert "minio-init" in base and "MINIO_ROOT_PASSWORD" not in _env(base["minio"])
    scram_admin = merged["services"]["scram-admin"]["environment"]
    assert _substitute(scram_admin["SLUICE_CONTROLLER_SECRET"]) == (
        "${file:/run/sluice/controller/secret}"
    )


def test_secrets_are_generated_once_and_mounted_only_where_needed(
    compose: dict, tmp_path: Path
) -> None:
    services = compose["services"]
    init = services["secrets-init"]
    assert init["entrypoint"][-1] == "sluice.compose_init" and init["command"][0] == "secrets"
    for name in ("minio", "postgres", "grafana", "prometheus", *CONTROLLERS):
        assert services[name]["depends_on"]["secrets-init"]["condition"] == (
            "service_completed_successfully"
        ), name
    audiences = {
        "secrets-controller": {*CONTROLLERS, *BROKERS},
        "secrets-postgres": {"postgres", *BROKERS},
        "secrets-minio": {"minio", "minio-init", *BROKERS},
        "secrets-grafana": {"grafana"},
        "secrets-prometheus": {"prometheus"},
    }
    for volume, readers in audiences.items():
        assert volume in compose["volumes"]
        mounted = {
            name
            for name, service in services.items()
            if name != "secrets-init"
            and any(str(v).startswith(f"{volume}:") for v in service.get("volumes", []))
        }
        assert mounted == readers, volume
        for name in readers:
            assert any(str(v).endswith(":ro") for v in services[name]["volumes"] if volume in v)

    # What secrets-init does: random, 0600, stable across runs (PostgreSQL and MinIO
    # keep the password of their first start), the DSN following the password.
    make_secrets(tmp_path, chown=False)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert [str(p.relative_to(tmp_path)) for p in files] == [
        "controller/secret",
        "grafana/password",
        "minio/password",
        "postgres/dsn",
        "postgres/password",
        "prometheus/controller-secret",
    ]
    first = {p: p.read_text() for p in files}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    values = [v.strip() for p, v in first.items() if p.name not in ("dsn", "controller-secret")]
    # Prometheus' copy is the controllers' secret (it scrapes their /metrics with it).
    assert (
        first[tmp_path / "prometheus" / "controller-secret"]
        == first[tmp_path / "controller" / "secret"]
    )
    assert len(set(values)) == len(values) and all(len(v) >= 24 for v in values)
    assert secret_problem(first[tmp_path / "controller" / "secret"].strip(), False) is None
    make_secrets(tmp_path, chown=False)
    assert {p: p.read_text() for p in files} == first
    (tmp_path / "postgres" / "dsn").unlink()
    make_secrets(tmp_path, chown=False)
    assert {p: p.read_text() for p in files} == first
    # The owners secrets-init gives the files are the images' users.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(rf"useradd .*--uid {SLUICE_UID}\b.* sluice", dockerfile)
    assert GRAFANA_UID == 472  # grafana/grafana's user


def test_the_ca_key_reaches_no_container(merged: dict, generated: Generated) -> None:
    """The CA's private key is written outside deploy/tls, the only host directory mounted
    (into tls-init alone); brokers and controllers get their certificates and keys, the
    CA certificate and the brokers' JAAS line, nothing else."""
    assert list(generated.tls.glob("*.key"))  # the server and client keys are there
    assert not (generated.tls / "ca.key").exists()
    assert (generated.tls.parent / "tls-ca" / "ca.key").exists()
    assert sorted(p.name for p in generated.node.iterdir()) == sorted(NODE_FILES)
    assert sorted(p.name for p in generated.admin.iterdir()) == sorted(ADMIN_FILES)
    for directory in (generated.node, generated.admin):
        for path in directory.iterdir():
            private = path.suffix in (".key", ".password", ".jaas")
            assert stat.S_IMODE(path.stat().st_mode) == (0o600 if private else 0o644), path
    for name, service in merged["services"].items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            assert "tls-ca" not in source and not source.endswith("ca.key"), (name, volume)
            if source.startswith(("/", ".")) and "deploy/tls" in source:
                assert name == "tls-init" and str(volume).endswith(":ro"), (name, volume)
        if name in (*BROKERS, *CONTROLLERS):
            assert "tls-node:/etc/sluice/tls:ro" in service["volumes"], name
            assert not any("tls-admin" in str(v) for v in service["volumes"]), name
    assert "tls-admin:/etc/sluice/admin:ro" in merged["services"]["scram-admin"]["volumes"]


def test_secure_generate_moves_an_old_ca_key_out_of_the_mounted_directory(
    tmp_path: Path,
) -> None:
    files = generate(tmp_path / "tls", ["localhost"])
    key = files.ca_key.read_bytes()
    os.replace(files.ca_key, tmp_path / "tls" / "ca.key")  # where older versions wrote it
    generate(tmp_path / "tls", ["localhost"])
    assert not (tmp_path / "tls" / "ca.key").exists()
    assert files.ca_key.read_bytes() == key
    assert stat.S_IMODE(files.ca_key.stat().st_mode) == 0o600


def test_prometheus_scrapes_the_controllers_with_their_secret(compose: dict) -> None:
    """The controllers' /metrics names every topic, so it takes the controller secret:
    Prometheus sends its own copy as a bearer token."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "sluice-controllers"]
    path = job["authorization"]["credentials_file"]
    mounts = compose["services"]["prometheus"]["volumes"]
    assert any(
        m.startswith("secrets-prometheus:") and path.startswith(m.split(":")[1]) for m in mounts
    )
