"""docker-compose.yml and deploy/, validated without a Docker daemon.

Structure (services, racks, ports, env naming), the Prometheus targets, the Grafana dashboard
and its metric names are checked here with PyYAML; the compose schema itself is checked by
``docker-compose config -q`` (Debian's docker-compose, which scripts/test installs) or
``docker compose config -q``: neither needs a daemon.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from broker.config import load_config, parse_config_file
from controller.config import load_settings

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
    """Compose's ${VAR:-default} with the variable unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _mounted_config(service: dict) -> Path:
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if target == service["command"][-1]:
            return ROOT / source
    raise AssertionError(f"the config file {service['command'][-1]} is not mounted")


def _published(service: dict) -> list[int]:
    out = []
    for port in service.get("ports", []):
        host, _, _container = str(port).rpartition(":")
        assert host, f"{port!r}: publish with an explicit host port"
        out.append(int(host))
    return out


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


def test_every_service_config_loads(compose: dict) -> None:
    """Each broker's and controller's file + SLUICE_* env go through the real loaders."""
    services = compose["services"]
    for name in BROKERS:
        service = services[name]
        file = parse_config_file(_mounted_config(service).read_text())
        env = {k: _substitute(v) for k, v in _env(service).items()}
        config = load_config(file, env=env)
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
        env = {k: _substitute(v) for k, v in _env(service).items()}
        settings = load_settings(file, env=env)
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


def _declared_metrics() -> dict[str, str]:
    """Metric name -> kind, from the broker's and the controller's registries."""
    out = {}
    for path in [ROOT / "broker" / "metrics.py", ROOT / "controller" / "service.py"]:
        for kind, name in re.findall(
            r"(Counter|Gauge|Histogram)\(\s*\"(sluice_\w+)\"", path.read_text()
        ):
            out[name] = kind
    return out


def _exposed(name: str, kind: str) -> set[str]:
    if kind == "Counter":
        return {f"{name}_total", f"{name}_created"}
    if kind == "Histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
    return {name}


def test_grafana_dashboard(compose: dict) -> None:
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
    exposed = {
        series: name
        for name, kind in _declared_metrics().items()
        for series in _exposed(name, kind)
    }
    used = set()
    for panel in panels:
        assert panel["title"] and panel["targets"], panel
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        for target in panel["targets"]:
            assert target["refId"] and target["expr"]
            assert target["datasource"]["uid"] == source["uid"]
            for series in re.findall(r"\bsluice_\w+", target["expr"]):
                assert series in exposed, f"{panel['title']}: no metric {series}"
                used.add(exposed[series])
    required = {
        "sluice_client_az_requests",
        "sluice_transformer_fallback",
        "sluice_controller_diskless_effective_rf",
        "sluice_controller_under_replicated_partitions",
        "sluice_produced_bytes",
        "sluice_fetched_bytes",
        "sluice_client_bytes",
        "sluice_requests",
        "sluice_upload_seconds",
        "sluice_commit_seconds",
        "sluice_find_batches_seconds",
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


def test_secure_compose_override_validates_and_secures_every_broker() -> None:
    """docker-compose.secure.yml merged over docker-compose.yml (by Compose itself): each
    broker's environment plus the shared properties is a broker config whose only listener
    is SASL_SSL on its published port, talking HTTPS to the controllers."""
    from broker.security.listeners import SecurityProtocol, listener_plan

    proc = subprocess.run(
        [*_compose_command(), "-f", str(COMPOSE), "-f", str(SECURE), "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    merged = yaml.safe_load(proc.stdout)["services"]
    shared = parse_config_file((DEPLOY / "config" / "broker.properties").read_text())
    for name in BROKERS:
        service = merged[name]
        assert "scram-admin" in service["depends_on"]
        config = load_config(shared, env={k: str(v) for k, v in service["environment"].items()})
        (listener,) = listener_plan(config).bound
        assert listener.protocol == SecurityProtocol.SASL_SSL
        assert [listener.port] == [int(p["published"]) for p in service["ports"]]
        assert all(s.startswith("https://") for s in config.controller_servers())
    for name in CONTROLLERS:
        env = merged[name]["environment"]
        assert env["SLUICE_SSL_CLIENT_AUTH"] == "required"
