"""The whole product as long-running supervised processes on this machine (``make run``).

One supervisord (the well-kept process manager from PyPI) runs every process type of
``deploy/processes.toml`` with production-shaped settings: the services' own defaults, no test timings.
It restarts a process that dies, stops them with SIGTERM (``make down``) and keeps a log per process.
The state lives in the local stack's PostgreSQL and Kafka, so it survives ``make down && make up``.

    python deploy/local/product.py up sims       render, start supervisord, start the simulators
    python deploy/local/product.py up product    migrate every database, start every service
    python deploy/local/product.py status        each process: supervisor state, /healthz, /readyz
    python deploy/local/product.py down          SIGTERM every process, then stop supervisord
    python deploy/local/product.py smoke         one card deposit through the running product
    python deploy/local/product.py tokens        the local callers' tokens (for curl and the CLIs)

Scale one process type: ``PRODUCT_SCALE="ledger-consume=3,mt5-credit-worker=2" make run``
(consumers, workers and relays; see docs/operations/scaling.md).
Run directory: ``PRODUCT_RUN_DIR`` (default ``.local/run``): the rendered configuration, the logs
(``logs/<process>.log``), the secrets (``secrets/``, generated once, mode 0600) and scratch data.
"""

from __future__ import annotations

import hashlib
import http.cookiejar
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jinja2
import typer
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.console import Console
from rich.table import Table
from supervisor.xmlrpc import SupervisorTransport  # type: ignore[import-untyped]

REPO: Final = Path(__file__).resolve().parents[2]
CATALOGUE: Final = REPO / "deploy" / "processes.toml"
TEMPLATE: Final = Path(__file__).resolve().parent / "supervisord.conf.j2"
PG: Final = REPO / "deploy" / "postgres" / "pg.sh"
PYTHON: Final = Path(sys.executable)
KAFKA: Final = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
MERCHANT: Final = "broker-eu"
MT5_GROUP: Final = "real\\usd"
SCALABLE: Final = frozenset({"consumer", "worker", "relay"})  # no fixed port of their own to share
GROUPS: Final = {"sims": frozenset({"simulator"})}  # every other long-running kind is in "product"
# people and callers of the local deployment; their tokens are generated once into secrets/tokens.json
OPERATOR_PERMISSIONS: Final = {
    "mt5-credit-operators": "deposits:view,withdrawals:view,withdrawals:prepare,withdrawals:approve",
    "reconciler-operators": "cases:view,cases:work,repairs:propose,repairs:approve",
    "ledger-api-tokens": "ledger:read,ledger:import",
}
OPERATORS: Final = ("alice", "bob")
# the console's operators (local users; production: SSO): console permissions each
_CONSOLE_ALL: Final = (
    "view,case_work,ledger_read,refund,repair_propose,repair_approve,withdrawal_prepare,withdrawal_approve,"
    "deadletter_replay"
)
CONSOLE_OPERATORS: Final = {"alice": _CONSOLE_ALL, "bob": _CONSOLE_ALL}  # two people: maker and checker
RECON_PERMISSIONS: Final = "cases:view,cases:work,repairs:propose,repairs:approve"

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])
out = Console(width=max(Console().width, 110))

# the console also acts on each consumer's dead letters (backbone.consumer.dlq_http)
DEADLETTERS: Final = "deadletters:view,deadletters:replay"


def run_dir() -> Path:
    return Path(os.environ.get("PRODUCT_RUN_DIR", REPO / ".local" / "run")).resolve()


# --- the catalogue -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    name: str
    service: str
    command: tuple[str, ...]
    kind: str
    port: int
    ports: tuple[int, ...]
    scaling: str
    kafka: bool
    database: bool
    calls: tuple[str, ...]
    env: dict[str, str]
    secrets: dict[str, str]

    @property
    def address_port(self) -> int:
        """The port ``{name}`` means to a caller: a simulator's first port, else its port."""
        return self.ports[0] if self.ports else self.port

    @property
    def group(self) -> str:
        return next((g for g, kinds in GROUPS.items() if self.kind in kinds), "product")


def catalogue() -> list[Process]:
    data = tomllib.loads(CATALOGUE.read_text())
    return [
        Process(
            name=p["name"],
            service=p["service"],
            command=tuple(p["command"]),
            kind=p["kind"],
            port=int(p["port"]),
            ports=tuple(p.get("ports", ())),
            scaling=p["scaling"],
            kafka=bool(p["kafka"]),
            database=bool(p["database"]),
            calls=tuple(p["calls"]),
            env=dict(p["env"]),
            secrets=dict(p["secrets"]),
        )
        for p in data["process"]
    ]


def scale() -> dict[str, int]:
    """``PRODUCT_SCALE`` ("name=n,name=n"): instances per process type; refused for a type that binds
    a fixed port (an API, a simulator) or a number below 1."""
    wanted: dict[str, int] = {}
    kinds = {p.name: p.kind for p in catalogue()}
    for item in filter(None, (s.strip() for s in os.environ.get("PRODUCT_SCALE", "").split(","))):
        name, _, count = item.partition("=")
        if name not in kinds:
            raise typer.BadParameter(f"PRODUCT_SCALE: no process type {name!r} in {CATALOGUE.name}")
        if kinds[name] not in SCALABLE:
            raise typer.BadParameter(f"PRODUCT_SCALE: {name} ({kinds[name]}) has a fixed port: one instance")
        if not count.isdigit() or int(count) < 1:
            raise typer.BadParameter(f"PRODUCT_SCALE: {item!r}: want name=<count of 1 or more>")
        wanted[name] = int(count)
    return wanted


@dataclass(frozen=True)
class Instance:
    process: Process
    index: int
    count: int

    @property
    def name(self) -> str:
        return self.process.name if self.count == 1 else f"{self.process.name}-{self.index}"

    @property
    def port(self) -> int:
        """Health port: the catalogue's, plus the instance's index (types are 10 ports apart)."""
        return self.process.port + self.index


def instances() -> list[Instance]:
    counts = scale()
    return [
        Instance(p, i, counts.get(p.name, 1))
        for p in catalogue()
        if p.kind != "job"
        for i in range(counts.get(p.name, 1))
    ]


# --- secrets (generated once; what a secret store would hold) -----------------------------------


def _dev_env() -> dict[str, str]:
    lines = (REPO / "deploy" / "dev.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _pg_url(name: str) -> str:
    done = subprocess.run(["bash", str(PG), "url", name], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _token() -> str:
    return secrets.token_urlsafe(24)


def _sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def ensure_secrets() -> Path:
    """Every secret file the catalogue names, written once (0600) into the run directory.

    The simulators' manager password, API key and webhook secret are deploy/dev.env's (the dev
    stack's tests use them); database URLs are pg.sh's roles; every token is random. The plain tokens
    of the local callers are in ``tokens.json`` (for curl, the CLIs and ``smoke``)."""
    path = run_dir() / "secrets"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    tokens_file = path / "tokens.json"
    tokens = json.loads(tokens_file.read_text()) if tokens_file.exists() else {}
    wanted = {
        "merchant": _token(),
        "credit_merchant": _token(),
        "credit_admin": _token(),
        **{f"{who}:{file}": _token() for file in OPERATOR_PERMISSIONS for who in OPERATORS},
        "ledger_app_password": _token(),
        "console": _token(),
        "console_mt5_credit": _token(),
        "console_ledger": _token(),
        "console_payment_state": _token(),
        "console_gateway": _token(),
        **{f"{who}:console-password": _token() for who in CONSOLE_OPERATORS},
    }
    grown = not tokens_file.exists() or any(k not in tokens for k in wanted)
    tokens = {**wanted, **tokens}  # what exists is kept: only a newer product's new callers are added
    dev = _dev_env()
    admin = _pg_url("admin")
    params = conninfo_to_dict(_pg_url("ledger"))
    params["user"], params["password"] = "ledger_app", tokens["ledger_app_password"]
    ledger_app = make_conninfo(**params)  # type: ignore[arg-type]
    values = {
        "mt5-manager-password": dev["MT5_SIM_MANAGER_PASSWORD"],
        "psp-api-key": dev["PSP_SIM_API_KEY"],
        "simpsp-webhook-secret": dev["PSP_SIM_WEBHOOK_SECRET"],
        "payment-state-api-tokens": f"{tokens['merchant']}={MERCHANT}",
        "mt5-credit-api-tokens": f"{tokens['credit_merchant']}={MERCHANT}",
        "mt5-credit-admin-token": tokens["credit_admin"],
        "ledger-app-db-url": ledger_app,
        "postgres-admin-url": admin,
        **{
            file: "".join(f"{who} {perms} {_sha(tokens[f'{who}:{file}'])}\n" for who in OPERATORS)
            for file, perms in OPERATOR_PERMISSIONS.items()
        },
        "console-reconciler-token": tokens["console"],
        "console-mt5-credit-token": tokens["console_mt5_credit"],
        "console-ledger-token": tokens["console_ledger"],
        "console-payment-state-token": tokens["console_payment_state"],
        "console-gateway-token": tokens["console_gateway"],
        # payment-state's and the gateway's operator APIs: only the console acts there
        "payment-state-operators": (
            f"console {DEADLETTERS},operators:assert {_sha(tokens['console_payment_state'])}\n"
        ),
        "webhook-gateway-api-tokens": (
            f"console receipts:view,operators:assert {_sha(tokens['console_gateway'])}\n"
        ),
        "console-credit-merchant-tokens": f"{MERCHANT} {tokens['credit_merchant']}\n",
        "console-merchant-tokens": f"{MERCHANT} {tokens['merchant']}\n",
    }
    # the console acts at the reconciler for the operator who logged in (backbone.tokens)
    values["reconciler-operators"] += (
        f"console {RECON_PERMISSIONS},{DEADLETTERS},operators:assert {_sha(tokens['console'])}\n"
    )
    credit_perms = OPERATOR_PERMISSIONS["mt5-credit-operators"]
    values["mt5-credit-operators"] += (
        f"console {credit_perms},{DEADLETTERS},operators:assert {_sha(tokens['console_mt5_credit'])}\n"
    )
    values["ledger-api-tokens"] += (
        f"console ledger:read,{DEADLETTERS},operators:assert {_sha(tokens['console_ledger'])}\n"
    )
    for process in catalogue():
        for name in process.secrets.values():
            if name.endswith("-db-url") and name not in values:
                values[name] = _pg_url(name.removesuffix("-db-url").replace("-", "_"))
    for name, value in values.items():
        target = path / name
        if not target.exists() or target.read_text() != value:
            target.write_text(value)
            target.chmod(0o600)
    if grown:
        tokens_file.write_text(json.dumps(tokens, indent=2))
        tokens_file.chmod(0o600)
    return path


# --- supervisord's configuration -------------------------------------------------------------


def _quote(value: str) -> str:
    """A value of supervisord's ``environment=``: quoted, ``%`` escaped (it expands ``%(name)s``)."""
    if any(c in value for c in '"\n\\'):
        raise ValueError(f"a setting value with a quote, backslash or newline cannot be rendered: {value!r}")
    return '"' + value.replace("%", "%%") + '"'


def environment(instance: Instance, secrets_dir: Path, addresses: dict[str, str]) -> dict[str, str]:
    """The settings of one instance: the catalogue's (peers resolved to 127.0.0.1 ports, listeners on
    loopback), its secrets as files, its health port and a stable consumer slot id."""
    process = instance.process
    env: dict[str, str] = {}
    for key, given in process.env.items():
        value = given.replace("{data}", str(run_dir() / "data" / instance.name))
        for peer, address in addresses.items():
            value = value.replace("{" + peer + "}", address)
        if key.endswith("_HOST") and value == "0.0.0.0":  # noqa: S104 - catalogue's container value
            value = "127.0.0.1"  # a shared machine: the local deployment listens on loopback only
        env[key] = value
    if "HEALTH_PORT" in env:
        env["HEALTH_PORT"] = str(instance.port)
    if process.kafka:
        env["KAFKA_BOOTSTRAP_SERVERS"] = KAFKA
    if process.kind == "consumer":
        env["CONSUMER_INSTANCE_ID"] = f"local-{instance.name}"  # static membership: the slot is stable
    for setting, name in process.secrets.items():
        key = setting if setting.endswith("_FILE") else f"{setting}_FILE"
        env[key] = str(secrets_dir / name)
    if process.service == "ops_console":  # plain http on loopback here; behind TLS everywhere else
        env["CONSOLE_COOKIE_SECURE"] = "false"
    if process.service == "psp_sim":  # the simulator's control listener is for the local harness only
        env["PSP_SIM_CONTROL_HOST"] = "127.0.0.1"
    return env


def render() -> Path:
    """Write ``supervisord.conf`` for every instance; returns its path."""
    secrets_dir = ensure_secrets()
    logs = run_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    addresses = {p.name: f"127.0.0.1:{p.address_port}" for p in catalogue() if p.kind != "job"}
    programs: list[dict[str, Any]] = []
    groups: dict[str, list[str]] = {}
    for instance in instances():
        env = environment(instance, secrets_dir, addresses)
        programs.append(
            {
                "name": instance.name,
                "command": " ".join([str(PYTHON), "-m", instance.process.service, *instance.process.command]),
                "stop_wait_s": 70 if instance.process.kind == "worker" else 30,
                "environment": ",".join(f"{k}={_quote(v)}" for k, v in sorted(env.items())),
            }
        )
        groups.setdefault(instance.process.group, []).append(instance.name)
    template = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE.parent),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - an ini file, not HTML; values are quoted by _quote
    ).get_template(TEMPLATE.name)
    conf = run_dir() / "supervisord.conf"
    conf.write_text(
        template.render(
            run=run_dir(),
            logs=logs,
            repo=REPO,
            path=f"{PYTHON.parent}:/usr/local/bin:/usr/bin:/bin",
            programs=programs,
            groups=groups,
        )
    )
    return conf


# --- talking to supervisord -----------------------------------------------------------------


def _rpc() -> Any:
    socket = f"unix://{run_dir() / 'supervisor.sock'}"
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, socket))


def _supervisord_running() -> bool:
    try:
        return _rpc().supervisor.getState()["statename"] == "RUNNING"  # type: ignore[no-any-return]
    except (OSError, xmlrpc.client.Fault):
        return False


def _ctl(*args: str) -> str:
    supervisorctl = PYTHON.parent / "supervisorctl"
    done = subprocess.run(
        [str(supervisorctl), "-c", str(run_dir() / "supervisord.conf"), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout + done.stderr


def _start_supervisord(conf: Path) -> None:
    if _supervisord_running():
        _ctl("update")  # a changed configuration (PRODUCT_SCALE, a new process type) takes effect
        return
    clean_env = {"PATH": f"{PYTHON.parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(run_dir())}
    clean_env["LANG"] = "C.UTF-8"
    subprocess.run([str(PYTHON.parent / "supervisord"), "-c", str(conf)], check=True, env=clean_env)
    deadline = time.monotonic() + 20
    while not _supervisord_running():
        if time.monotonic() > deadline:
            raise SystemExit(f"supervisord did not start: see {run_dir() / 'logs' / 'supervisord.log'}")
        time.sleep(0.2)


def _probe(port: int, path: str) -> int:
    """HTTP status of ``GET 127.0.0.1:port/path``, 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def _wait_ready(members: list[Instance], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = list(members)
    while waiting:
        waiting = [i for i in waiting if _probe(i.port, "/readyz") != 200]
        if not waiting:
            return
        if time.monotonic() > deadline:
            for instance in waiting:
                log = run_dir() / "logs" / f"{instance.name}.log"
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
                out.print(f"[red]{instance.name}[/] not ready on :{instance.port}; its log ends:\n{tail}")
            raise SystemExit(f"not ready within {timeout_s:.0f}s: {[i.name for i in waiting]}")
        time.sleep(0.5)


def migrate() -> None:
    """Apply every service's migrations (as its owner role), then give the ledger its restricted
    runtime role (no UPDATE/DELETE on the books): what a deployment's migration job does."""
    secrets_dir = ensure_secrets()
    for service in sorted({p.service for p in catalogue() if p.database and p.kind != "simulator"}):
        owner = _pg_url(service)
        if service == "ledger":
            args, env = ["migrate", "--url", owner], {}
        else:
            args, env = ["migrate"], {"DATABASE_URL": owner}
        done = subprocess.run(
            [str(PYTHON), "-m", service, *args],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{service} migrate failed: {done.stderr[-2000:]}")
        out.print(f"migrated {service}: {done.stdout.strip()}")
    tokens = json.loads((secrets_dir / "tokens.json").read_text())
    done = subprocess.run(
        [
            *(str(PYTHON), "-m", "ledger", "provision-role", "--admin-url", _pg_url("admin")),
            *("--database", "ledger", "--role", "ledger_app"),
        ],
        env={**os.environ, "LEDGER_APP_PASSWORD": tokens["ledger_app_password"]},
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"ledger provision-role failed: {done.stderr[-2000:]}")
    # the console's local users, reset on every run to these permissions and tokens.json's passwords
    # (a dev deployment; elsewhere operators are added once with `users add --if-new`, or SSO)
    for who, grants in CONSOLE_OPERATORS.items():
        done = subprocess.run(
            [
                str(PYTHON),
                "-m",
                "ops_console",
                "users",
                "add",
                who,
                "--permissions",
                grants,
                "--merchant",
                MERCHANT,
            ],
            env={**os.environ, "DATABASE_URL": _pg_url("ops_console")},
            input=tokens[f"{who}:console-password"] + "\n",
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"ops_console users add {who} failed: {done.stderr[-2000:]}")


# --- commands --------------------------------------------------------------------------------


@app.command()
def up(group: str = typer.Argument(help="sims | product"), timeout_s: float = 120) -> None:
    """Start a group (the product's start also migrates first) and wait until each answers /readyz."""
    if group not in ("sims", "product"):
        raise typer.BadParameter("sims | product")
    conf = render()
    _start_supervisord(conf)
    if group == "product":
        migrate()
    members = [i for i in instances() if i.process.group == group]
    result = _ctl("start", f"{group}:*")
    if "ERROR" in result and "already started" not in result:
        out.print(result)
    _wait_ready(members, timeout_s)
    out.print(f"[green]{group}[/]: {len(members)} processes ready (logs in {run_dir() / 'logs'})")


@app.command()
def status() -> None:
    """Each process: supervisor's state, pid, uptime, and what /healthz and /readyz answer."""
    if not _supervisord_running():
        out.print("supervisord: not running (make up / make run start it)")
        raise typer.Exit(3)
    info = {p["name"]: p for p in _rpc().supervisor.getAllProcessInfo()}
    table = Table("process", "group", "state", "pid", "uptime", "port", "healthz", "readyz")
    unhealthy = 0
    for instance in instances():
        p = info.get(instance.name, {})
        state = p.get("statename", "absent")
        health = _probe(instance.port, "/healthz") if state == "RUNNING" else 0
        ready = _probe(instance.port, "/readyz") if state == "RUNNING" else 0
        colour = "green" if state == "RUNNING" and ready == 200 else "red"
        colour = "yellow" if state == "STOPPED" else colour
        unhealthy += colour == "red"
        uptime = p.get("now", 0) - p.get("start", 0) if state == "RUNNING" else 0
        table.add_row(
            instance.name,
            instance.process.group,
            f"[{colour}]{state}[/]",
            str(p.get("pid") or ""),
            f"{uptime}s" if uptime else "",
            str(instance.port),
            str(health or "-"),
            str(ready or "-"),
        )
    out.print(table)
    raise typer.Exit(1 if unhealthy else 0)


@app.command()
def down() -> None:
    """SIGTERM every process (supervisord waits up to each one's stopwaitsecs), then stop supervisord."""
    if not _supervisord_running():
        out.print("supervisord: not running")
        return
    pid = int((run_dir() / "supervisord.pid").read_text())
    _rpc().supervisor.shutdown()
    deadline = time.monotonic() + 120
    while _alive(pid):
        if time.monotonic() > deadline:
            raise SystemExit("supervisord did not stop within 120 s")
        time.sleep(0.2)
    out.print("supervisord and every process stopped")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@app.command()
def tokens() -> None:
    """Print the local callers' tokens (JSON): merchant, credit_merchant, credit_admin, operators'."""
    print((ensure_secrets() / "tokens.json").read_text())


def _http(method: str, url: str, body: Any = None, token: str = "", key: str = "") -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - our own loopback URLs
        url, data=None if body is None else json.dumps(body).encode(), method=method
    )
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if key:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:  # noqa: S310 - the request built above
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None


def _until(what: str, check: Any, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"smoke: {what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.5)


@app.command()
def smoke(login: int = 0, amount_minor: int = 12_345) -> dict[str, Any]:
    """One card deposit through the running product, as a broker would drive it: an MT5 account,
    a deposit intent, a payment authorized and captured at the PSP simulator, the MT5 deal with its
    reference, the journals in the ledger. Prints the payment id; exit 1 if any step fails."""
    t = json.loads((ensure_secrets() / "tokens.json").read_text())
    ports = {p.name: p.address_port for p in catalogue() if p.kind != "job"}
    mt5_control = f"http://127.0.0.1:{ports['mt5-sim'] + 1}/control"
    credit, payments = (
        f"http://127.0.0.1:{ports['mt5-credit-api']}",
        f"http://127.0.0.1:{ports['payment-state-api']}",
    )
    login = login or 700_000 + int(time.time()) % 100_000
    customer = f"cust-{login}"
    _http("POST", f"{mt5_control}/groups", {"group": MT5_GROUP, "currency": "USD", "digits": 2})
    account = {"login": login, "group": MT5_GROUP, "balance": "0"}
    status, body = _http("POST", f"{mt5_control}/accounts", account)
    if status not in (200, 201, 409):
        raise SystemExit(f"smoke: MT5 account: {status} {body}")
    status, body = _http(
        "PUT",
        f"{credit}/accounts/{login}",
        {"customer_id": customer, "currency": "USD", "enabled": True},
        token=t["credit_admin"],
    )
    if status != 200:
        raise SystemExit(f"smoke: account mapping: {status} {body}")
    status, intent = _http(
        "POST",
        f"{credit}/deposit-intents",
        {"customer_id": customer, "mt5_login": login, "amount_minor": amount_minor, "currency": "USD"},
        token=t["credit_merchant"],
        key=uuid.uuid4().hex,
    )
    if status != 201:
        raise SystemExit(f"smoke: deposit intent: {status} {intent}")
    ref = intent["deposit_reference"]
    status, created = _http(
        "POST",
        f"{payments}/payments",
        {
            "amount_minor": amount_minor,
            "currency": "USD",
            "payment_method_token": "pm_card_visa",
            "deposit_reference": ref,
        },
        token=t["merchant"],
        key=uuid.uuid4().hex,
    )
    if status != 201:
        raise SystemExit(f"smoke: payment: {status} {created}")
    payment_id = created.get("payment", created)["payment_id"]

    def payment_status() -> str:
        code, body = _http("GET", f"{payments}/payments/{payment_id}", token=t["merchant"])
        return str(body.get("payment", body)["status"]) if code == 200 else ""

    _until("authorization", lambda: payment_status() == "AUTHORIZED")
    status, body = _http(
        "POST", f"{payments}/payments/{payment_id}/capture", {}, token=t["merchant"], key=uuid.uuid4().hex
    )
    if status not in (200, 202):
        raise SystemExit(f"smoke: capture: {status} {body}")
    _until("capture", lambda: payment_status() == "CAPTURED")

    def credited() -> list[Any]:
        code, body = _http("GET", f"{credit}/deposit-intents/{ref}", token=t["credit_merchant"])
        done = [c for c in body["credits"] if c["status"] == "done"] if code == 200 else []
        return done

    _until("the MT5 credit", credited)
    _, found = _http("GET", f"{mt5_control}/deals?login={login}")
    deals = [{"deal": d["Deal"], "profit": d["Profit"], "comment": d["Comment"]} for d in found["deals"]]
    if len(deals) != 1 or deals[0]["profit"] != f"{amount_minor / 100:.2f}":
        raise SystemExit(f"smoke: want one MT5 deal of {amount_minor / 100:.2f} on {login}, found {deals}")
    ledger = f"http://127.0.0.1:{ports['ledger-api']}"
    ledger_token = t["alice:ledger-api-tokens"]

    def journals() -> list[Any]:
        code, body = _http("GET", f"{ledger}/v1/journals?payment_id={payment_id}", token=ledger_token)
        return list(body["journals"]) if code == 200 and len(body["journals"]) >= 2 else []

    posted = _until("the journals", journals)
    _console_shows(payment_id, t["alice:console-password"], [f"mt5-credit:{c}" for c in _credit_ids(posted)])
    result = {
        "payment_id": payment_id,
        "deposit_reference": ref,
        "mt5_login": login,
        "deals": deals,
        "journals": [j["rule"] for j in posted],
    }
    out.print_json(json.dumps(result))
    return result


def _credit_ids(journals: list[Any]) -> list[str]:
    return [
        str(j["reference"]).split(":", 1)[1]
        for j in journals
        if str(j["reference"]).startswith("mt5-credit:")
    ]


def _console_shows(payment_id: str, password: str, expected: list[str]) -> None:
    """An operator logs into the console (its login form, CSRF token and session cookie, as a
    browser does) and finds the deposit with its state, its credit and its journals."""
    base = f"http://127.0.0.1:{next(p.port for p in catalogue() if p.name == 'ops-console')}"
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = opener.open(base + "/login", timeout=15).read().decode()
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    if token is None:
        raise SystemExit("console: no login form")
    form = urllib.parse.urlencode(
        {"csrf": token.group(1), "username": "alice", "password": password}
    ).encode()
    opener.open(base + "/login", data=form, timeout=15).read()
    page = opener.open(f"{base}/search?q={payment_id}", timeout=15).read().decode()
    missing = [text for text in ["CAPTURED", *expected] if text not in page]
    if missing:
        raise SystemExit(f"console: the deposit page lacks {missing}")
    out.print(f"console: alice sees {payment_id} CAPTURED with its credit and journals")


@app.command()
def stop(group: str = typer.Argument(help="sims | product")) -> None:
    """SIGTERM every process of one group (supervisord itself keeps running)."""
    out.print(_ctl("stop", f"{group}:*"))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def job(ctx: typer.Context, name: str) -> None:
    """Run a job of the catalogue once with its settings, e.g. ``job reconciler-run --date 2026-12-01``."""
    process = next((p for p in catalogue() if p.name == name and p.kind == "job"), None)
    if process is None:
        raise typer.BadParameter(f"no job {name!r} in {CATALOGUE.name}")
    addresses = {p.name: f"127.0.0.1:{p.address_port}" for p in catalogue() if p.kind != "job"}
    env = environment(Instance(process, 0, 1), ensure_secrets(), addresses)
    command = [str(PYTHON), "-m", process.service, *process.command, *ctx.args]
    raise typer.Exit(subprocess.run(command, env={"PATH": os.environ["PATH"], **env}, check=False).returncode)


def _payment(payment_id: str) -> dict[str, Any]:
    t = json.loads((ensure_secrets() / "tokens.json").read_text())
    port = next(p.port for p in catalogue() if p.name == "payment-state-api")
    code, body = _http("GET", f"http://127.0.0.1:{port}/payments/{payment_id}", token=t["merchant"])
    if code != 200:
        raise SystemExit(f"payment {payment_id}: {code} {body}")
    return dict(body.get("payment", body))


@app.command()
def verify() -> None:
    """What `make verify-run` proves on the running stack, as an operator would see it: the product
    starts and takes a deposit; every long-running process SIGKILLed is restarted by supervisord and
    ready again; `down` stops everything with SIGTERM, each process exiting 0; after `up` again the
    first deposit is still there (state survives) and a second deposit goes through."""
    up("sims")
    up("product")
    first = smoke()
    info = {p["name"]: p for p in _rpc().supervisor.getAllProcessInfo()}
    victims = [i for i in instances() if i.process.group == "product"]
    for instance in victims:
        os.kill(int(info[instance.name]["pid"]), 9)
    out.print(f"SIGKILLed {len(victims)} processes; supervisord restarts them")

    def restarted() -> bool:
        now = {p["name"]: p for p in _rpc().supervisor.getAllProcessInfo()}
        fresh = [now[i.name] for i in victims if now[i.name]["pid"] != info[i.name]["pid"]]
        return len(fresh) == len(victims) and all(p["statename"] == "RUNNING" for p in fresh)

    _until("every killed process to be running again", restarted, 120)
    _wait_ready(victims, 120)
    log = run_dir() / "logs" / "supervisord.log"
    before = log.stat().st_size
    down()
    with log.open(errors="replace") as lines:
        lines.seek(before)
        stopped = [line for line in lines if " stopped: " in line]
    unclean = [line.strip() for line in stopped if "(exit status 0)" not in line]
    if len(stopped) < len(instances()) or unclean:
        raise SystemExit(f"down: want each process to exit 0 on SIGTERM; {len(stopped)} stopped: {unclean}")
    up("sims")
    up("product")
    kept = _payment(first["payment_id"])
    if kept["status"] != "CAPTURED":
        raise SystemExit(f"after down/up the first payment is {kept['status']}, not CAPTURED")
    second = smoke()
    kept_id, new_id = first["payment_id"], second["payment_id"]
    out.print(f"[green]verified[/]: {kept_id} kept across down/up; {new_id} credited")


@app.command(name="render")
def render_command() -> None:
    """Only write supervisord.conf (and the secrets), printing its path."""
    print(render())


@app.command()
def logs(name: str, lines: int = 50) -> None:
    """The end of one process's log."""
    log = run_dir() / "logs" / f"{name}.log"
    if not log.exists():
        raise SystemExit(f"no log {log}")
    print("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))


if __name__ == "__main__":
    if shutil.which("bash") is None:
        raise SystemExit("bash is required (deploy/postgres/pg.sh)")
    app()
