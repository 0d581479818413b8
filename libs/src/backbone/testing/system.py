"""The whole product as real processes on one Kafka + PostgreSQL: for end-to-end tests and the demo.

It starts processes by command only (``python -m <service> <command>``), never importing a service:
both simulators, the webhook gateway, payment-state, mt5-credit and the ledger, each with its own
fresh database (migrated from its ``migrations/``) and every topic in a fresh namespace
(``KAFKA_TOPIC_PREFIX``), so runs never see each other's data. Timings are short so that faults
resolve in seconds (the call budget and leases stay related the way the services check at start).

    with System(stack, workdir).start() as system:
        system.mt5.control.create_group(...)
        system.http("POST", system.urls.payment_state + "/payments", body, token=..., key=...)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess
from backbone.testing import databases
from backbone.testing.kafka import topic_namespace
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import REPO_ROOT, Stack, free_port

PSP_API_KEY: Final = "sk_test_system_0123456789"
WEBHOOK_SECRET: Final = "whsec_system_0123456789abcdef"  # noqa: S105 - a test value
MERCHANT: Final = "broker-eu"
MERCHANT_TOKEN: Final = "system-merchant-token-0123456789"  # noqa: S105 - a test value
CREDIT_TOKEN: Final = "system-credit-token-0123456789"  # noqa: S105 - a test value
CREDIT_ADMIN_TOKEN: Final = "system-credit-admin-0123456789"  # noqa: S105 - a test value
LEDGER_TOKEN: Final = "system-ledger-token-0123456789"  # noqa: S105 - a test value
# the reconciler's operators: each their own token (maker-checker needs two people)
OPERATORS: Final = {
    "alice": ("system-operator-alice-0123456789", "cases:view,cases:work,repairs:propose,repairs:approve"),
    "bob": ("system-operator-bob-0123456789", "cases:view,cases:work,repairs:propose,repairs:approve"),
}
# the console's token at the reconciler (it acts for the operator who logged in) and its operators
CONSOLE_TOKEN: Final = "system-console-token-0123456789"  # noqa: S105 - a test value
CONSOLE_PASSWORD: Final = "system operator password"  # noqa: S105 - a test value
CONSOLE_OPERATORS: Final = {  # name -> (console permissions, merchants)
    "alice": (
        "view,case_work,ledger_read,repair_propose,repair_approve,withdrawal_prepare,withdrawal_approve,"
        "deadletter_replay,refund",
        MERCHANT,
    ),
    "bob": ("view,case_work,repair_approve,withdrawal_approve", MERCHANT),
    "eve": ("view", "another-merchant"),
}
# mt5-credit's operators (withdrawals): the same people, their own tokens for this service
CREDIT_OPERATORS: Final = {
    "alice": ("system-credit-alice-0123456789", "withdrawals:view,withdrawals:prepare,withdrawals:approve"),
    "bob": ("system-credit-bob-0123456789", "withdrawals:view,withdrawals:prepare,withdrawals:approve"),
}
LEDGER_ROLE: Final = "ledger_app_test"  # shared by every test database (roles are cluster-wide)
LEDGER_ROLE_PASSWORD: Final = "ledger_app_test"  # noqa: S105 - a throwaway role on a dev cluster
MT5_GROUP: Final = "real\\usd"
FX_RATES: Final = "EUR:USD=1.0835"  # mt5-credit's fixed table: a EUR card deposit into a USD account

# The one home of mt5-credit's short test timings (the end-to-end system, the credit process tests
# and bench-mt5 all use these): MT5 call budget = lock 1 s + connect 1 s + 4 x call 1 s = 6 s;
# lease 8 s >= budget + 1 s margin (the worker refuses to start otherwise); the resolver waits the
# budget + 0.5 s after the call's start.
MT5_WORKER_ENV: Final = {
    "MT5_CALL_TIMEOUT_MS": "1000",
    "MT5_LOCK_TIMEOUT_MS": "1000",
    "MT5_CONNECT_TIMEOUT_MS": "1000",
    "CREDIT_LEASE_MS": "8000",
    "CREDIT_LEASE_MARGIN_MS": "1000",
    "RESOLVE_DEAD_MARGIN_MS": "500",
    "RESOLVE_BACKOFF_BASE_MS": "200",
    "RESOLVE_BACKOFF_CAP_MS": "1000",
    "CREDIT_POLL_INTERVAL_MS": "50",
    "CREDIT_LANES": "2",
}
CONSUMER_ENV: Final = {"CONSUMER_POLL_TIMEOUT_MS": "100", "CONSUMER_BATCH_LINGER_MS": "5"}
RELAY_ENV: Final = {"OUTBOX_POLL_INTERVAL_MS": "100"}
# the gateway's catch-up of lost webhooks, at test pace: a webhook later than 5 s is caught up
CATCH_UP_ENV: Final = {"CATCH_UP_INTERVAL_MS": "1000", "CATCH_UP_SETTLE_S": "5", "CATCH_UP_OVERLAP_S": "30"}
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
class Urls:
    psp: str = ""
    psp_control: str = ""
    gateway: str = ""
    payment_state: str = ""
    mt5_credit: str = ""
    ledger: str = ""
    reconciler: str = ""
    console: str = ""


@dataclass
class System:
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

    def _db(self, service: str, migrated: bool = True) -> str:
        url = databases.create_database(
            self.stack.pg_admin_url, [_migrations(service)] if migrated else [], prefix=f"sys_{service}"
        )
        self.dbs[service] = url
        return url

    def _run(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
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
        self.mt5 = SimulatorProcess(self._db("mt5_sim", migrated=False), self.workdir).start()
        self.mt5.control.create_group(MT5_GROUP, "USD", 2)
        self._start_gateway()
        self._start_psp()
        self._start_payment_state()
        self._start_mt5_credit()
        if self.with_ledger:
            self._start_ledger()
        if self.with_reconciler:
            self._start_reconciler()
            if self.with_console:
                self._start_console()
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

    def _start_gateway(self) -> None:
        url, port = self._db("webhook_gateway"), free_port()
        self.urls.gateway = f"http://127.0.0.1:{port}"
        tokens = self.workdir / "gateway-api-tokens"  # the console reads a payment's receipts
        tokens.write_text(f"console receipts:view,operators:assert sha256:{_sha(CONSOLE_TOKEN)}\n")
        env = {
            "DATABASE_URL": url,
            "SIMPSP_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "HTTP_PORT": str(port),
            "GATEWAY_API_TOKENS_FILE": str(tokens),
        }
        self._run("gateway-api", ["-m", "webhook_gateway", "api"], env)
        self._run("gateway-relay", ["-m", "webhook_gateway", "relay"], {"DATABASE_URL": url, **RELAY_ENV})

    def _start_psp(self) -> None:
        api, control = free_port(), free_port()
        self.urls.psp, self.urls.psp_control = f"http://127.0.0.1:{api}", f"http://127.0.0.1:{control}"
        env = {
            "DATABASE_URL": self._db("psp_sim", migrated=False),
            "PSP_SIM_API_KEY": PSP_API_KEY,
            "PSP_SIM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "PSP_SIM_WEBHOOK_URL": f"{self.urls.gateway}/providers/simpsp/webhooks",
            "PSP_SIM_API_PORT": str(api),
            "PSP_SIM_CONTROL_PORT": str(control),
            "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS": "100",
            "PSP_SIM_WEBHOOK_BACKOFF_MAX_MS": "1000",
            "PSP_SIM_WEBHOOK_POLL_INTERVAL_MS": "50",
        }
        self._run("psp_sim", ["-m", "psp_sim"], env)
        catch_up = {
            "DATABASE_URL": self.dbs["webhook_gateway"],
            "PSP_BASE_URL": self.urls.psp,
            "PSP_API_KEY": PSP_API_KEY,
            **CATCH_UP_ENV,
        }
        self._run("gateway-catch-up", ["-m", "webhook_gateway", "catch-up"], catch_up)

    def _start_payment_state(self) -> None:
        url, port = self._db("payment_state"), free_port()
        self.urls.payment_state = f"http://127.0.0.1:{port}"
        db = {"DATABASE_URL": url}
        psp = {"PSP_BASE_URL": self.urls.psp, "PSP_API_KEY": PSP_API_KEY, "PSP_TIMEOUT_MS": "2000"}
        operators = self.workdir / "payment_state-operators"  # the console acts on its dead letters
        operators.write_text(
            f"console deadletters:view,deadletters:replay,operators:assert sha256:{_sha(CONSOLE_TOKEN)}\n"
        )
        api_env = {
            **db,
            "PAYMENT_STATE_OPERATORS_FILE": str(operators),
            "PAYMENT_STATE_API_TOKENS": f"{MERCHANT_TOKEN}={MERCHANT}",
            "PAYMENT_STATE_HTTP_PORT": str(port),
            "PAYMENT_STATE_DB_POOL_SIZE_MAX": "4",
        }
        self._run("payment_state-api", ["-m", "payment_state", "api"], api_env)
        # a claim left by a killed worker expires in 10 s instead of the product's 60 s; still above
        # batch / concurrency x 2 x PSP_TIMEOUT_MS (16 / 8 x 2 x 2 s), as the setting asks
        worker = {**db, **psp, "EXECUTOR_LEASE_MS": "10000"}
        self._run("payment_state-worker", ["-m", "payment_state", "worker"], worker)
        self._run("payment_state-consume", ["-m", "payment_state", "consume"], {**db, **CONSUMER_ENV})
        self._run("payment_state-relay", ["-m", "payment_state", "relay"], {**db, **RELAY_ENV})

    def _start_mt5_credit(self) -> None:
        assert self.mt5 is not None
        url, port = self._db("mt5_credit"), free_port()
        self.urls.mt5_credit = f"http://127.0.0.1:{port}"
        db = {"DATABASE_URL": url, "FX_RATES": FX_RATES}
        mt5 = {
            "MT5_WEBAPI_URL": self.mt5.url,
            "MT5_MANAGER_LOGIN": str(MANAGER_LOGIN),
            "MT5_MANAGER_PASSWORD": MANAGER_PASSWORD,
            **MT5_WORKER_ENV,
        }
        operators = self.workdir / "mt5_credit-operators"
        operators.write_text(
            "".join(
                f"{who} {perms} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
                for who, (token, perms) in CREDIT_OPERATORS.items()
            )
            + "console deposits:view,withdrawals:view,withdrawals:prepare,withdrawals:approve,"
            "deadletters:view,deadletters:replay,operators:assert"
            f" sha256:{hashlib.sha256(CONSOLE_TOKEN.encode()).hexdigest()}\n"
        )
        api_env = {
            **db,
            **mt5,
            "HTTP_PORT": str(port),
            "MT5_CREDIT_API_TOKENS": f"{CREDIT_TOKEN}={MERCHANT}",
            "MT5_CREDIT_ADMIN_TOKEN": CREDIT_ADMIN_TOKEN,
            "MT5_CREDIT_OPERATORS_FILE": str(operators),
        }
        self._run("mt5_credit-api", ["-m", "mt5_credit", "api"], api_env)
        self._run("mt5_credit-consume", ["-m", "mt5_credit", "consume"], {**db, **CONSUMER_ENV})
        self._run("mt5_credit-worker", ["-m", "mt5_credit", "worker"], {**db, **mt5})
        self._run("mt5_credit-relay", ["-m", "mt5_credit", "relay"], {**db, **RELAY_ENV})

    def _start_ledger(self) -> None:
        """The ledger runs as its restricted runtime role (no UPDATE/DELETE), provisioned like production."""
        admin_db_url, port = self._db("ledger"), free_port()
        self.urls.ledger = f"http://127.0.0.1:{port}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ledger",
                "provision-role",
                "--admin-url",
                admin_db_url,
                "--role",
                LEDGER_ROLE,
            ],
            env={**os.environ, "LEDGER_APP_PASSWORD": LEDGER_ROLE_PASSWORD},
            check=True,
            capture_output=True,
        )
        params = conninfo_to_dict(admin_db_url)
        params["user"], params["password"] = LEDGER_ROLE, LEDGER_ROLE_PASSWORD
        db = {"DATABASE_URL": make_conninfo(**params)}  # type: ignore[arg-type]
        tokens = self.workdir / "ledger-tokens"
        digest = hashlib.sha256(LEDGER_TOKEN.encode()).hexdigest()
        console = hashlib.sha256(CONSOLE_TOKEN.encode()).hexdigest()
        tokens.write_text(
            f"system ledger:read,ledger:import sha256:{digest}\n"
            f"console ledger:read,deadletters:view,deadletters:replay,operators:assert sha256:{console}\n"
        )
        self._run("ledger-consume", ["-m", "ledger", "consume"], {**db, **CONSUMER_ENV})
        self._run("ledger-relay", ["-m", "ledger", "relay"], {**db, **RELAY_ENV})
        api_env = {**db, "LEDGER_HTTP_PORT": str(port), "LEDGER_API_TOKENS_FILE": str(tokens)}
        self._run("ledger-api", ["-m", "ledger", "api"], api_env)

    def _start_reconciler(self) -> None:
        db = {"DATABASE_URL": self._db("reconciler")}
        self._run("reconciler-consume", ["-m", "reconciler", "consume"], {**db, **CONSUMER_ENV})
        self._run("reconciler-relay", ["-m", "reconciler", "relay"], {**db, **RELAY_ENV})
        tokens = self.workdir / "reconciler-operators"
        tokens.write_text(
            "".join(
                f"{name} {grants} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
                for name, (token, grants) in OPERATORS.items()
            )
            + "console cases:view,cases:work,repairs:propose,repairs:approve,"
            "deadletters:view,deadletters:replay,operators:assert"
            f" sha256:{hashlib.sha256(CONSOLE_TOKEN.encode()).hexdigest()}\n"
        )
        port = free_port()
        self.urls.reconciler = f"http://127.0.0.1:{port}"
        api_env = {
            **db,
            "RECON_HTTP_PORT": str(port),
            "RECON_HTTP_HOST": "127.0.0.1",
            "RECON_API_TOKENS_FILE": str(tokens),
        }
        self._run("reconciler-api", ["-m", "reconciler", "api"], api_env)
        if self.monitor_after_s is not None:
            monitor_env = {
                "RECON_MONITOR_DATA_DIR": str(self.workdir / "reconciler-monitor-data"),
                "RECON_MONITOR_CREDIT_AFTER_S": str(self.monitor_after_s),
                "RECON_MONITOR_JOURNAL_AFTER_S": str(self.monitor_after_s),
                "RECON_MONITOR_CHECK_INTERVAL_MS": "250",
                "RECON_MONITOR_PARTITIONS": str(self.partitions),  # the namespace's topics
                "RECON_MONITOR_METRICS_PORT": str(free_port()),
            }
            self._run("reconciler-monitor", ["-m", "reconciler", "monitor"], monitor_env)

    def _start_console(self) -> None:
        url, port = self._db("ops_console"), free_port()
        for name, (grants, merchant) in CONSOLE_OPERATORS.items():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ops_console",
                    "users",
                    "add",
                    name,
                    "--permissions",
                    grants,
                    "--merchant",
                    merchant,
                    "--display-name",
                    name.title(),
                ],
                input=CONSOLE_PASSWORD + "\n",
                text=True,
                env={**os.environ, "DATABASE_URL": url},
                check=True,
                capture_output=True,
            )
        merchants = self.workdir / "console-merchant-tokens"
        merchants.write_text(f"{MERCHANT} {MERCHANT_TOKEN}\n")
        merchants.chmod(0o600)
        credit_merchants = self.workdir / "console-credit-merchant-tokens"
        credit_merchants.write_text(f"{MERCHANT} {CREDIT_TOKEN}\n")
        credit_merchants.chmod(0o600)
        self.urls.console = f"http://127.0.0.1:{port}"
        env = {
            "DATABASE_URL": url,
            "CONSOLE_HTTP_HOST": "127.0.0.1",
            "CONSOLE_HTTP_PORT": str(port),
            "CONSOLE_RECONCILER_URL": self.urls.reconciler,
            "CONSOLE_RECONCILER_TOKEN": CONSOLE_TOKEN,
            "CONSOLE_PAYMENT_STATE_URL": self.urls.payment_state,
            "CONSOLE_MT5_CREDIT_URL": self.urls.mt5_credit,
            "CONSOLE_MT5_CREDIT_TOKEN": CONSOLE_TOKEN,
            "CONSOLE_CREDIT_MERCHANT_TOKENS_FILE": str(credit_merchants),
            **(
                {"CONSOLE_LEDGER_URL": self.urls.ledger, "CONSOLE_LEDGER_TOKEN": CONSOLE_TOKEN}
                if self.with_ledger
                else {}
            ),
            "CONSOLE_MERCHANT_TOKENS_FILE": str(merchants),
            "CONSOLE_PAYMENT_STATE_TOKEN": CONSOLE_TOKEN,
            "CONSOLE_GATEWAY_URL": self.urls.gateway,
            "CONSOLE_GATEWAY_TOKEN": CONSOLE_TOKEN,
            "CONSOLE_COOKIE_SECURE": "false",  # plain http on 127.0.0.1
        }
        self._run("ops-console", ["-m", "ops_console", "serve"], env)

    def recon_api(self, operator: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call of the reconciler's API as ``operator`` (a name of ``OPERATORS``)."""
        return self.http(method, self.urls.reconciler + path, body, token=OPERATORS[operator][0])

    def reconciler_env(self, grace_s: int = 0) -> dict[str, str]:
        """What ``python -m reconciler run`` needs against this system (PSP reports, MT5 deals)."""
        assert self.mt5 is not None
        return {
            **os.environ,
            "DATABASE_URL": self.dbs["reconciler"],
            "KAFKA_TOPIC_PREFIX": self.prefix,
            "RECON_PSP_API_URL": self.urls.psp,
            "RECON_PSP_API_KEY": PSP_API_KEY,
            "RECON_GRACE_S": str(grace_s),
            "MT5_WEBAPI_URL": self.mt5.url,
            "MT5_MANAGER_LOGIN": str(MANAGER_LOGIN),
            "MT5_MANAGER_PASSWORD": MANAGER_PASSWORD,
        }

    def reconcile(self, day: str, grace_s: int = 0, *extra: str) -> dict[str, Any]:
        """One run of ``python -m reconciler run --date day --json``: its JSON and exit code."""
        done = subprocess.run(
            [sys.executable, "-m", "reconciler", "run", "--date", day, "--json", *extra],
            env=self.reconciler_env(grace_s),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if not done.stdout.strip():
            raise AssertionError(
                f"reconciler run printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout)
        result["exit_code"] = done.returncode
        return result

    def journals(self, payment_id: str) -> list[dict[str, Any]]:
        status, body = self.http(
            "GET", f"{self.urls.ledger}/v1/journals?payment_id={payment_id}", token=LEDGER_TOKEN
        )
        assert status == 200, body
        return list(body["journals"] if isinstance(body, dict) else body)

    # --- the flows a broker drives ---------------------------------------------------------------

    def open_mt5_account(self, login: int, customer: str, currency: str = "USD") -> None:
        """The account on the MT5 server and its owner in mt5-credit's mapping."""
        assert self.mt5 is not None
        self.mt5.control.create_account(login, MT5_GROUP, balance="0")
        status, body = self.http(
            "PUT",
            f"{self.urls.mt5_credit}/accounts/{login}",
            {"customer_id": customer, "currency": currency, "enabled": True},
            token=CREDIT_ADMIN_TOKEN,
        )
        assert status == 200, body

    def create_deposit(
        self,
        customer: str,
        login: int,
        amount_minor: int,
        card: str,
        currency: str = "USD",
        *,
        traceparent: str | None = None,
    ) -> tuple[str, str]:
        """A deposit intent (server side) and its payment; returns (deposit_reference, payment_id).
        ``traceparent``: both calls are made in this trace, as a traced broker server would."""
        status, intent = self.http(
            "POST",
            f"{self.urls.mt5_credit}/deposit-intents",
            {"customer_id": customer, "mt5_login": login, "amount_minor": amount_minor, "currency": currency},
            token=CREDIT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status == 201, intent
        ref = str(intent["deposit_reference"])
        body = {
            "amount_minor": amount_minor,
            "currency": currency,
            "payment_method_token": card,
            "deposit_reference": ref,
        }
        status, created = self.http(
            "POST",
            f"{self.urls.payment_state}/payments",
            body,
            token=MERCHANT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status == 201, created
        return ref, str(created.get("payment", created)["payment_id"])

    def payment(self, payment_id: str) -> dict[str, Any]:
        status, body = self.http(
            "GET", f"{self.urls.payment_state}/payments/{payment_id}", token=MERCHANT_TOKEN
        )
        assert status == 200, body
        return dict(body.get("payment", body))

    def wait_payment(self, payment_id: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
        wait_until(lambda: self.payment(payment_id)["status"] == status, timeout_s, f"payment {status}")
        return self.payment(payment_id)

    def capture(self, payment_id: str, *, traceparent: str | None = None) -> None:
        status, body = self.http(
            "POST",
            f"{self.urls.payment_state}/payments/{payment_id}/capture",
            {},
            token=MERCHANT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status in (200, 202), body

    def refund(self, payment_id: str, amount_minor: int, currency: str = "USD") -> None:
        status, body = self.http(
            "POST",
            f"{self.urls.payment_state}/payments/{payment_id}/refunds",
            {"amount_minor": amount_minor, "currency": currency},
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        assert status in (200, 201, 202), body

    def credits(self, ref: str) -> list[dict[str, Any]]:
        status, body = self.http("GET", f"{self.urls.mt5_credit}/deposit-intents/{ref}", token=CREDIT_TOKEN)
        assert status == 200, body
        return list(body["credits"])

    def wait_credits(self, ref: str, statuses: list[str], timeout_s: float = 60) -> list[dict[str, Any]]:
        def reached() -> bool:
            return [c["status"] for c in self.credits(ref)] == statuses

        wait_until(reached, timeout_s, f"credits of {ref} to be {statuses}")
        return self.credits(ref)

    # withdrawals (docs/adr/0008): the broker's server asks, two operators approve

    def request_withdrawal(
        self,
        customer: str,
        login: int,
        amount_minor: int,
        card: str,
        currency: str = "USD",
        key: str | None = None,
    ) -> tuple[int, Any]:
        """``POST /v1/withdrawals`` as the broker's server; (status, body)."""
        body = {
            "customer_id": customer,
            "mt5_login": login,
            "amount_minor": amount_minor,
            "currency": currency,
            "destination_token": card,
        }
        return self.http(
            "POST", f"{self.urls.mt5_credit}/v1/withdrawals", body, token=CREDIT_TOKEN, key=key or new_key()
        )

    def credit_api(self, operator: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call of mt5-credit's API as ``operator`` (a name of ``CREDIT_OPERATORS``)."""
        return self.http(method, self.urls.mt5_credit + path, body, token=CREDIT_OPERATORS[operator][0])

    def approve_withdrawal(self, wid: str, maker: str = "alice", checker: str = "bob") -> dict[str, Any]:
        """Prepared by ``maker``, approved by ``checker`` with the digest the preparation showed."""
        status, prepared = self.credit_api(
            maker, "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "checked"}
        )
        assert status == 200, prepared
        status, approved = self.credit_api(
            checker,
            "POST",
            f"/v1/withdrawals/{wid}/approve",
            {"command_digest": prepared["command_digest"], "reason": "second pair of eyes"},
        )
        assert status == 200, approved
        return dict(approved)

    def withdrawal(self, wid: str) -> dict[str, Any]:
        status, body = self.http("GET", f"{self.urls.mt5_credit}/v1/withdrawals/{wid}", token=CREDIT_TOKEN)
        assert status == 200, body
        return dict(body)

    def wait_withdrawal(self, wid: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
        wait_until(lambda: self.withdrawal(wid)["status"] == status, timeout_s, f"withdrawal {status}")
        return self.withdrawal(wid)

    def psp_write(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return self.http("POST", self.urls.psp + path, body, token=PSP_API_KEY, key=new_key())

    def psp_fault(self, **rule: Any) -> None:
        status, body = self.http("POST", f"{self.urls.psp_control}/control/faults", rule)
        assert status in (200, 201), body

    def deals(self, comment: str) -> list[dict[str, Any]]:
        assert self.mt5 is not None
        return self.mt5.control.deals(comment=comment)

    # --- talking to it --------------------------------------------------------------------------

    def http(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        token: str | None = None,
        key: str | None = None,
        timeout_s: float = 15,
        traceparent: str | None = None,
    ) -> tuple[int, Any]:
        """One JSON request; returns (status, parsed body or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - built from our URLs
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        if key:
            request.add_header("Idempotency-Key", key)
        if traceparent:
            request.add_header("traceparent", traceparent)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - our own URL
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except ValueError:
                return error.code, raw.decode(errors="replace")


def new_key() -> str:
    """A fresh Idempotency-Key."""
    return f"k-{uuid.uuid4().hex}"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - local health URL
            return True
    except urllib.error.HTTPError:
        return True  # it answers (perhaps not ready yet)
    except OSError:
        return False
