"""The ``sluice`` command: ``dev``, ``broker``, ``controller``, ``cluster`` and ``jobs``.

``sluice dev`` runs a single-node cluster on the embedded default: a local
directory as object store and SQLite as batch coordinator and topic catalog.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

from broker.config import BrokerConfig, load_config, parse_config_file
from common.malloc_tuning import tune_malloc

from .cluster import DEFAULT_RACKS

log = logging.getLogger("sluice")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_HELP = "log verbosity: DEBUG, INFO, WARNING, ERROR or CRITICAL (default INFO)"
DESCRIPTION = (
    "Sluice: a Kafka-compatible diskless broker. Stock Kafka clients produce and consume "
    "through it; the data lives in object storage, ordered by a batch coordinator database."
)

# How long a clean stop (flush, answer, deregister) may take before the process just exits.
SHUTDOWN_TIMEOUT_S = 30.0


def _overrides(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"sluice: -o expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow),
    not the machine's count: a broker per core only helps on cores it can use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _broker_count(value: str) -> int:
    """``--brokers``: a count, or ``cores`` for one broker process per usable core. A broker
    is one Python process with one event loop, so it uses about one core; more processes
    are how one host's other cores get used (they share the storage, see docs/operations.md)."""
    if value.strip().lower() == "cores":
        return usable_cores()
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'cores', got {value!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError("the number of brokers cannot be negative")
    return count


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sluice")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sluice {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser(
        "dev",
        help="single-node cluster on the embedded default",
        description="Run a whole cluster in one process: one broker and a single-voter "
        "controller, with a local directory as object store and SQLite as coordinator, "
        "all under --data-dir. Data survives restarts; stop with Ctrl-C or SIGTERM.",
    )
    dev.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    dev.add_argument("--port", type=int, default=9092, help="listen port (default 9092)")
    dev.add_argument("--data-dir", default="./.sluice", help="data directory (default ./.sluice)")
    dev.add_argument("--config", help="properties file with broker configs")
    dev.add_argument(
        "--jobs-every",
        type=float,
        metavar="SECONDS",
        help="also run the PySpark jobs scheduler (needs the jobs extra): merge small objects "
        "and compact cleanup.policy=compact topics every SECONDS (log in <data-dir>/jobs.log)",
    )
    dev.add_argument(
        "-o",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker config, e.g. -o produce.commit.interval.ms=100",
    )
    dev.add_argument("--log-level", default="INFO", help=LOG_LEVEL_HELP)

    broker = sub.add_parser(
        "broker",
        help="one broker of a cluster (storage and peers from the config)",
        description="Run one broker of a cluster: object store, coordinator database and "
        "controller quorum come from --config, SLUICE_* variables and -o.",
    )
    broker.add_argument("--config", required=True, help="properties file with broker configs")
    broker.add_argument(
        "-o",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker config on top of the file and SLUICE_* variables",
    )
    broker.add_argument("--log-level", default="INFO", help=LOG_LEVEL_HELP)

    controller = sub.add_parser(
        "controller",
        help="one voter of the Raft controller quorum (cluster metadata)",
        description="Run one voter of the Raft-replicated controller quorum (1, 3 or 5 "
        "voters), which keeps the cluster metadata log brokers follow.",
    )
    controller.add_argument("--config", help="properties file with controller configs")
    controller.add_argument(
        "-o",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a controller config on top of the file and SLUICE_* variables",
    )
    controller.add_argument("--log-level", default="INFO", help=LOG_LEVEL_HELP)

    cluster = sub.add_parser(
        "cluster",
        help="a local multi-AZ cluster: PostgreSQL, SeaweedFS, a controller quorum and N brokers",
        description="Start, stop or inspect a local multi-AZ cluster: PostgreSQL, SeaweedFS "
        "(S3), a quorum of controllers and N brokers, all under --dir.",
    )
    cluster_sub = cluster.add_subparsers(dest="action", required=True)
    up = cluster_sub.add_parser("up", help="start it and leave it running")
    up.add_argument(
        "--brokers",
        type=_broker_count,
        default=6,
        help="number of brokers (default 6), or 'cores': one broker process per CPU this "
        "process may run on, the layout for scaling out on one host",
    )
    up.add_argument(
        "--controllers",
        type=int,
        default=3,
        choices=(0, 1, 3, 5),
        help="controller quorum size (default 3; 0: brokers register in the database)",
    )
    up.add_argument(
        "--racks",
        default=",".join(DEFAULT_RACKS),
        help="racks (availability zones) assigned to brokers in turn (default az-a,az-b,az-c)",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL listeners with a generated CA (under DIR/tls), HTTPS with client "
        "certificates to the controllers, Kafka's StandardAuthorizer, and a SCRAM-SHA-512 "
        "user 'admin' whose password is written to DIR/tls/admin.password (0600; its path "
        "is printed, never the password)",
    )
    up.add_argument(
        "-o",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config every broker gets",
    )
    for action in (
        up,
        cluster_sub.add_parser("down", help="stop what `up` started"),
        cluster_sub.add_parser("status", help="which of its processes run"),
    ):
        action.add_argument(
            "--dir",
            default="./.sluice-cluster",
            help="where everything lives (default ./.sluice-cluster)",
        )
        action.add_argument("--log-level", default="INFO", help=LOG_LEVEL_HELP)

    # PySpark jobs (jobs/); pyspark itself is imported only when a job runs.
    from jobs.cli import add_parser as add_jobs_parser

    add_jobs_parser(sub)
    return parser


def run_cluster(args: argparse.Namespace) -> int:
    from . import cluster
    from .launch.seaweedfs import roomy_volume_mb

    try:
        if args.action == "up":
            racks = [r.strip() for r in args.racks.split(",") if r.strip()]
            local = cluster.LocalCluster(
                args.dir,
                args.brokers,
                racks,
                _overrides(args.overrides),
                controllers=args.controllers,
                secure=args.secure,
                seaweed_volume_mb=roomy_volume_mb(Path(args.dir).absolute()),
            )
            if os.path.exists(os.path.join(args.dir, cluster.STATE_FILE)):
                print(f"sluice: a cluster is already up in {args.dir}", file=sys.stderr)
                return 2
            local.up()
            _print_addresses(local.detach())
            return 0
        if args.action == "down":
            stopped = cluster.down_detached(args.dir)
            print("stopped: " + (", ".join(stopped) or "nothing was running"))
            return 0
        running = cluster.status(args.dir)
        for name, pid, alive in running:
            print(f"{name} pid {pid} {'running' if alive else 'not running'}")
        _print_addresses(cluster.read_state(args.dir))
        return 0 if all(alive for _, _, alive in running) else 1
    except cluster.ClusterError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 2


def _print_addresses(state: dict[str, object]) -> None:
    """Where a local cluster's controllers and brokers listen (`up` and `status`)."""
    for c in state.get("controllers", ()):  # type: ignore[attr-defined]
        scheme = "https" if state.get("security") else "http"
        print(f"controller {c['node_id']} {scheme}://127.0.0.1:{c['http_port']}")
    for b in state.get("brokers", ()):  # type: ignore[attr-defined]
        print(
            f"broker {b['node_id']} {b['rack'] or '-'} 127.0.0.1:{b['port']}"
            f" (metrics http://127.0.0.1:{b['http_port']}/metrics)"
        )
    print(f"bootstrap.servers={state['bootstrap']}")
    security = state.get("security")
    if isinstance(security, dict):
        # The path, not the password: a terminal's scrollback, a CI log or a shared screen
        # would keep it. The file is readable by its owner only.
        print("security.protocol=SASL_SSL")
        print("sasl.mechanism=SCRAM-SHA-512")
        print("sasl.username=admin")
        print(f"sasl.password: in {security['password_file']} (readable by you only)")
        print(f"ssl.ca.location={security['ssl.ca.location']}")
        properties = security["client_properties"]
        print(f"(all of the above, for librdkafka clients and kcat -F: {properties})")


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    layers: list[dict[str, str]] = []
    if args.config:
        with open(args.config) as f:
            layers.append(parse_config_file(f.read()))
    if args.command == "dev":
        # The embedded default, whatever the file says about storage.
        layers.append(
            {
                "host": args.host,
                "port": str(args.port),
                "data.dir": args.data_dir,
                "object.store": "local",
                "coordinator": "sqlite",
            }
        )
    layers.append(_overrides(args.overrides))
    return load_config(*layers, env=os.environ)


async def run_broker(
    config: BrokerConfig, embedded_controller: bool = False, jobs_every_s: float | None = None
) -> None:
    from broker.metadata.controller_catalog import ControllerCatalog
    from broker.node import Broker
    from storage.backends import coordinator_and_catalog, object_store

    os.makedirs(config.data_dir, exist_ok=True)
    controller = None
    if embedded_controller:
        from controller.embedded import EmbeddedController

        controller = EmbeddedController(
            node_id=config.node_id,
            data_dir=config.data_dir,
            session_timeout_ms=config.broker_session_timeout_ms,
            default_partitions=config.num_partitions,
            default_diskless=config.log_diskless_enable,
            default_replication_factor=config.default_replication_factor,
        )
        # The embedded controller binds port 0 for its Raft and HTTP listeners; the kernel
        # may hand it a port the broker's own listeners are configured to use (a port a
        # launcher probed free and gave us moments ago). Held while the controller binds,
        # those ports cannot be picked.
        with _reserved(_listener_ports(config)):
            await controller.start()
        config = dataclasses.replace(
            config,
            controller_quorum_bootstrap_servers=controller.bootstrap,
            controller_secret=controller.secret,
        )
    jobs = None
    if jobs_every_s:
        from .launch.jobs import ScheduledJobs

        jobs = ScheduledJobs(config.data_dir, jobs_every_s)
    try:
        # Controller mode: topics live in the controllers' metadata log, not the database.
        coordinator, catalog = coordinator_and_catalog(
            config, ControllerCatalog.from_config(config) if config.controller_mode else None
        )
        try:
            broker = Broker(config, object_store(config), coordinator, catalog)
        except ValueError as exc:  # listeners, TLS files, SASL settings
            raise StartFailed(str(exc)) from None
        await _serve(
            broker,
            after_start=jobs.start if jobs is not None else None,
        )
    finally:
        if jobs is not None:
            await jobs.stop()
        if controller is not None:
            await controller.stop()


async def run_controller(settings: object) -> None:
    from controller.service import ControllerService

    await _serve(ControllerService(settings))  # type: ignore[arg-type]


class StartFailed(Exception):
    pass


def _listener_ports(config: BrokerConfig) -> list[tuple[str, int]]:
    from broker.security.listeners import listener_plan

    try:
        plan = listener_plan(config)
    except ValueError:
        return []  # reported when the broker starts
    return [(listener.host, listener.port) for listener in plan.bound if listener.port]


@contextlib.contextmanager
def _reserved(addresses: list[tuple[str, int]]) -> Iterator[None]:
    held = []
    for host, port in addresses:
        # No SO_REUSEADDR: a socket that has it could still share the port with this one.
        # Never listening nor connected, it leaves no TIME_WAIT behind when closed.
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            s.bind((host, port))
        except OSError:
            s.close()  # in use already: the broker's own bind will say so
            continue
        held.append(s)
    try:
        yield
    finally:
        for s in held:
            s.close()


# Set by a SIGTERM/SIGINT that arrives after the data directory is locked but before _serve
# installs its handlers (building the broker imports and opens much; on a loaded machine that
# is seconds): the start is then stopped as soon as it begins, instead of the signal's
# default action killing the process mid-way.
_EARLY_STOP = threading.Event()


def _catch_early_stop() -> None:
    def early(_signum: int, _frame: object) -> None:
        _EARLY_STOP.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, early)


async def _serve(
    server: object,
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
    after_start: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run ``server`` until SIGTERM/SIGINT, then stop it cleanly. A second signal, or a
    shutdown taking longer than ``shutdown_timeout_s``, exits at once (status 1)."""
    from storage.coordinator import CoordinatorUnavailable
    from storage.objects import ObjectStoreError

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    # The loop may still hand over a signal the early handler already saw (it was written to
    # the loop's wakeup fd too): that one is not a second signal.
    redelivered = _EARLY_STOP.is_set()

    def on_signal() -> None:
        nonlocal redelivered
        if redelivered:
            redelivered = False
            stop.set()
            return
        if stop.is_set():
            log.warning("second signal: exiting without finishing the shutdown")
            logging.shutdown()
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    if _EARLY_STOP.is_set():
        stop.set()  # a signal came while the process was still building the server
    # A start can wait a long time (storage unreachable, a node id held by a live broker):
    # a signal meanwhile must stop it, not wait for it to finish.
    starting = asyncio.ensure_future(server.start())  # type: ignore[attr-defined]
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("stopped while starting")
        starting.cancel()
        with contextlib.suppress(BaseException):
            await starting
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.stop(), shutdown_timeout_s)  # type: ignore[attr-defined]
        return
    stopping.cancel()
    try:
        starting.result()
    except (CoordinatorUnavailable, ObjectStoreError, OSError, RuntimeError) as exc:
        raise StartFailed(f"{type(exc).__name__}: {exc}") from exc
    if after_start is not None:
        try:
            await after_start()
        except OSError as exc:  # e.g. the jobs scheduler could not be started
            log.error("could not start a companion process: %s", exc)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        try:
            await asyncio.wait_for(server.stop(), shutdown_timeout_s)  # type: ignore[attr-defined]
        except TimeoutError:
            log.error("shutdown did not finish within %.0f s; exiting", shutdown_timeout_s)
            logging.shutdown()
            os._exit(1)


def _lock(data_dir: str | os.PathLike[str]) -> int | None:
    """Lock the data directory for this process's lifetime (before anything in it is read
    or written); the exit status when that is impossible."""
    from storage.data_dir_lock import DataDirInUse, lock_data_dir

    try:
        _HELD_LOCKS.append(lock_data_dir(data_dir))
    except DataDirInUse as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc.strerror or exc
        print(f"sluice: cannot use data directory {data_dir}: {reason}", file=sys.stderr)
        return 2
    return None


_HELD_LOCKS: list[object] = []


class _LabelledFormatter(logging.Formatter):
    """Names the process on every line ("broker 3 az-b"): logs of a cluster get merged.
    In `sluice dev` the controller runs in the broker's process: its lines (the
    ``controller`` package's loggers) carry its own label."""

    def __init__(self, who: str, controller_who: str | None) -> None:
        super().__init__("%(asctime)s %(levelname)s [%(who)s] %(name)s: %(message)s")
        self._who = who
        self._controller_who = controller_who

    def format(self, record: logging.LogRecord) -> str:
        in_controller = record.name == "controller" or record.name.startswith("controller.")
        record.who = self._controller_who if in_controller and self._controller_who else self._who
        return super().format(record)


def _log_as(who: str, controller_who: str | None = None) -> None:
    formatter = _LabelledFormatter(who, controller_who)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)


def _data_dir_error(path: str) -> str | None:
    """Why ``path`` cannot be the data directory (None: it can), said in one line."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"data directory {path} exists and is not a directory"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return f"cannot create data directory {path}: {exc.strerror or exc}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"data directory {path} is not writable"
    return None


def _storage_summary(config: BrokerConfig) -> str:
    """Where the broker looked for its storage, without secrets."""
    from urllib.parse import urlsplit

    if config.coordinator == "postgresql":
        dsn = urlsplit(config.coordinator_dsn)
        coordinator = f"PostgreSQL at {dsn.hostname}:{dsn.port or 5432}{dsn.path}"
    else:
        coordinator = f"SQLite in {config.data_dir}"
    if config.object_store == "s3":
        store = f"S3 bucket {config.s3_bucket!r} at {config.s3_endpoint or 'AWS'}"
    else:
        store = f"objects in {config.data_dir}"
    return f"{coordinator}; {store}"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if str(args.log_level).upper() not in LOG_LEVELS:
        print(
            f"sluice: --log-level {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep running without it
        uvloop = None
    if args.command in ("dev", "broker"):
        try:
            config = broker_config(args)
            config.static_brokers()  # fail early on a malformed list
            from broker.security.listeners import listener_plan

            listener_plan(config)  # and on listeners that do not fit together
            # ACLs live in the controllers' log (`sluice dev` embeds a controller).
            broker_alone = args.command == "broker" and not config.controller_mode
            if broker_alone and config.authorizer_class_name:
                raise ValueError(
                    "authorizer.class.name needs controller.quorum.bootstrap.servers: "
                    "ACLs are kept in the controllers' metadata log"
                )
        except (OSError, ValueError) as exc:
            print(f"sluice: {exc}", file=sys.stderr)
            return 2
        if (problem := _data_dir_error(config.data_dir)) is not None:
            print(f"sluice: {problem}", file=sys.stderr)
            return 2
        _catch_early_stop()
        if (failed := _lock(config.data_dir)) is not None:
            return failed
        tune_malloc()  # megabyte buffers keep their pages (common/malloc_tuning.py)
        runner = uvloop.run if uvloop else asyncio.run
        # `sluice dev` is a whole cluster in one process: its controller runs inside (unless
        # the config points at a quorum); `sluice broker` follows the configured quorum.
        embedded = args.command == "dev" and not config.controller_mode
        _log_as(
            f"broker {config.node_id}" + (f" {config.rack}" if config.rack else ""),
            f"controller {config.node_id}" if embedded else None,
        )
        try:
            runner(run_broker(config, embedded, getattr(args, "jobs_every", None)))
        except StartFailed as exc:
            print(f"sluice: cannot start broker {config.node_id}: {exc}", file=sys.stderr)
            print(f"sluice: storage: {_storage_summary(config)}", file=sys.stderr)
            return 2
        return 0
    if args.command == "controller":
        from controller.config import load_settings

        try:
            layers = []
            if args.config:
                with open(args.config) as f:
                    layers.append(parse_config_file(f.read()))
            layers.append(_overrides(args.overrides))
            settings = load_settings(*layers, env=os.environ)
        except (OSError, ValueError) as exc:
            print(f"sluice: {exc}", file=sys.stderr)
            return 2
        if (problem := _data_dir_error(str(settings.data_dir))) is not None:
            print(f"sluice: {problem}", file=sys.stderr)
            return 2
        _catch_early_stop()
        if (failed := _lock(settings.data_dir)) is not None:
            return failed
        runner = uvloop.run if uvloop else asyncio.run
        _log_as(f"controller {settings.node_id}")
        try:
            runner(run_controller(settings))
        except StartFailed as exc:
            print(f"sluice: cannot start controller {settings.node_id}: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "cluster":
        return run_cluster(args)
    if args.command == "jobs":
        from jobs.cli import run as run_jobs

        return run_jobs(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
