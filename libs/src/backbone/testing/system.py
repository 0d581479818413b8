"""The whole product as real processes on one Kafka + PostgreSQL: for end-to-end tests and the demo.

It starts processes by command only (``python -m <service> <command>``), never importing a service:
both simulators, the webhook gateway, payment-state, mt5-credit and the ledger, each with its own
fresh database (migrated from its ``migrations/``) and every topic in a fresh namespace
(``KAFKA_TOPIC_PREFIX``), so runs never see each other's data. Timings are short so that faults
resolve in seconds (the call budget and leases stay related the way the services check at start).

    with System(stack, workdir).start() as system:
        system.mt5.control.create_group(...)
        system.http("POST", system.urls.payment_state + "/payments", body, token=..., key=...)

This module owns the processes (start, stop, restart, scale out, health); how each service is
started is ``system_services``, the calls on the running system ``system_client``, and the
credentials and timings they share ``system_config``.
"""

from __future__ import annotations

import functools
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from backbone.mt5.testing import SimulatorProcess
from backbone.testing import databases, system_services
from backbone.testing.kafka import topic_namespace
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import REPO_ROOT, Stack, free_port
from backbone.testing.system_client import SystemClient, Urls
from backbone.testing.system_config import MT5_GROUP

HTTP_PROCESSES: Final = frozenset(
    {
        "gateway-api",
        "payment_state-api",
        "mt5_credit-api",
        "ledger-api",
        "reconciler-api",
        "reconciler-monitor",
        "psp_sim",
    }
)


def _migrations(service: str) -> Path:
    return REPO_ROOT / "services" / service / "migrations"


@dataclass
class System(SystemClient):
    stack: Stack
    workdir: Path
    urls: Urls = field(default_factory=Urls)
    procs: dict[str, Proc] = field(default_factory=dict)
    dbs: dict[str, str] = field(default_factory=dict)
    prefix: str = ""
    mt5: SimulatorProcess | None = None
    with_ledger: bool = True
    with_reconciler: bool = False  # its consumer, relay and API; runs are started with reconcile()
    with_console: bool = False  # with the reconciler: the ops console, CONSOLE_OPERATORS logged in
    monitor_after_s: int | None = None  # with the reconciler: also its streaming monitor, N = this
    liveness_timeout_ms: int = 60_000  # HEALTH_LIVENESS_TIMEOUT_MS of every process
    health_ports: dict[str, int] = field(default_factory=dict)  # process -> HEALTH_PORT (no HTTP API)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # process -> its own settings
    partitions: int = 3  # of every topic of the namespace (the catalogue's own count is 12)
    # process type -> instances, for the types that scale out (consumers, workers, relays): instance
    # k of type "ledger-consume" is the process "ledger-consume.k", with its own health port and slot id
    replicas: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)  # type -> (args, env)
    extra_env: dict[str, dict[str, str]] = field(default_factory=dict)  # process type -> more settings
    # when set, every process writes its finished spans as JSON lines to <trace_dir>/<process>.spans.jsonl
    trace_dir: Path | None = None

    def start(self) -> System:
        self._namespace = topic_namespace(self.stack.kafka_bootstrap, self.partitions)
        self.prefix = self._namespace.__enter__()
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> System:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        if self.mt5 is not None:
            self.mt5.kill()
        for url in self.dbs.values():
            databases.drop_database(self.stack.pg_admin_url, url)
        if self.prefix:
            self._namespace.__exit__(None, None, None)
            self.prefix = ""

    # --- processes ------------------------------------------------------------------------------

    def new_database(self, service: str, migrated: bool = True) -> str:
        """A fresh database for ``service`` (migrated from its ``migrations/``), dropped at ``stop``."""
        url = databases.create_database(
            self.stack.pg_admin_url, [_migrations(service)] if migrated else [], prefix=f"sys_{service}"
        )
        self.dbs[service] = url
        return url

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        """Start process type ``name``: one process, or ``replicas[name]`` instances ``name.k``."""
        env = {**env, **self.extra_env.get(name, {})}
        count = self.replicas.get(name, 1)
        if count == 1:
            return self._start(name, args, env)
        if name in HTTP_PROCESSES:
            raise ValueError(f"{name} serves a fixed HTTP port: one instance")
        self.kinds[name] = (args, env)
        started = [self._start(f"{name}.{k}", args, env) for k in range(count)]
        return started[0]

    def instances(self, kind: str) -> list[str]:
        """The processes of type ``kind`` started so far (alive or not)."""
        return [n for n in self.procs if n == kind or n.rsplit(".", 1)[0] == kind]

    def add_instance(self, kind: str) -> str:
        """Start one more instance of a scaled-out process type; returns its name."""
        args, env = self.kinds[kind]
        name = f"{kind}.{len(self.instances(kind))}"
        self._start(name, args, env)
        return name

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        """Start process ``name``; one without an HTTP API of its own serves health on a port
        (``health_ports``); a consumer gets a stable slot id (static membership), as a supervisor
        would give it."""
        base = {
            "KAFKA_BOOTSTRAP_SERVERS": self.stack.kafka_bootstrap,
            "KAFKA_TOPIC_PREFIX": self.prefix,
            "HEALTH_LIVENESS_TIMEOUT_MS": str(self.liveness_timeout_ms),
            "CONSUMER_INSTANCE_ID": f"{self.prefix}{name}",
        }
        if name not in HTTP_PROCESSES:
            base["HEALTH_PORT"] = str(self.health_ports.setdefault(name, free_port()))
        if self.trace_dir is not None:
            base["TRACING_FILE"] = str(self.trace_dir / f"{name}.spans.jsonl")
        proc = Proc(args, {**base, **env}, self.workdir / f"{name}.log")
        self.procs[name], self.envs[name] = proc, env
        return proc

    def restart(self, name: str, **env: str) -> Proc:
        """SIGKILL process ``name`` and start it again with the same command and settings, plus ``env``."""
        old = self.procs[name]
        old.kill()
        given = old.popen.args
        assert isinstance(given, list)  # Proc starts every process from a list: [python, *args]
        return self._start(name, [str(a) for a in given[1:]], {**self.envs[name], **env})

    def health(self, name: str) -> tuple[int, dict[str, Any]]:
        """``/healthz`` of process ``name`` (its HTTP API's, or its health port's)."""
        return self._probe(name, "/healthz")

    def readiness(self, name: str) -> tuple[int, dict[str, Any]]:
        return self._probe(name, "/readyz")

    def _probe(self, name: str, path: str) -> tuple[int, dict[str, Any]]:
        """(status, body); (0, {}) while nothing answers on the port (not started yet, or frozen)."""
        try:
            status, body = self.http("GET", self._http_base(name) + path, timeout_s=3)
        except OSError:
            return 0, {}
        return status, dict(body or {})

    def _http_base(self, name: str) -> str:
        if name in self.health_ports:
            return f"http://127.0.0.1:{self.health_ports[name]}"
        return {
            "gateway-api": self.urls.gateway,
            "payment_state-api": self.urls.payment_state,
            "mt5_credit-api": self.urls.mt5_credit,
            "ledger-api": self.urls.ledger,
            "psp_sim": self.urls.psp,
        }[name]

    def _start_all(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mt5 = SimulatorProcess(self.new_database("mt5_sim", migrated=False), self.workdir).start()
        self.mt5.control.create_group(MT5_GROUP, "USD", 2)
        system_services.start_gateway(self)
        system_services.start_psp(self)
        system_services.start_payment_state(self)
        system_services.start_mt5_credit(self)
        if self.with_ledger:
            system_services.start_ledger(self)
        if self.with_reconciler:
            system_services.start_reconciler(self)
            if self.with_console:
                system_services.start_console(self)
        for name, url in (
            ("gateway-api", self.urls.gateway + "/healthz"),
            ("psp_sim", self.urls.psp + "/healthz"),
            ("payment_state", self.urls.payment_state + "/healthz"),
            ("mt5_credit", self.urls.mt5_credit + "/healthz"),
            *([("ledger", self.urls.ledger + "/healthz")] if self.with_ledger else []),
            *([("reconciler-api", self.urls.reconciler + "/healthz")] if self.with_reconciler else []),
            *([("ops-console", self.urls.console + "/readyz")] if self.urls.console else []),
        ):
            wait_until(functools.partial(_answers, url), 60, f"{name} to answer", alive=self._all_alive)

    def _all_alive(self) -> bool:
        dead = [n for n, p in self.procs.items() if p.popen.poll() is not None]
        if dead:
            raise AssertionError(f"process(es) died: {dead}; logs in {self.workdir}")
        return True


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - local health URL
            return True
    except urllib.error.HTTPError:
        return True  # it answers (perhaps not ready yet)
    except OSError:
        return False
