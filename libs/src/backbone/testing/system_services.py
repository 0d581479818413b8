"""How the end-to-end ``System`` starts each service: its database, settings and processes.

One function per service, called in order by ``System.start`` (a later service is given the URLs
of those started before it). Each creates the service's fresh database, writes the files its
settings name (operators' and tokens' digests), and starts its processes by command only
(``python -m <service> <command>``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD
from backbone.testing.stack import free_port
from backbone.testing.system_config import (
    CATCH_UP_ENV,
    CONSOLE_OPERATORS,
    CONSOLE_PASSWORD,
    CONSOLE_TOKEN,
    CONSUMER_ENV,
    CREDIT_ADMIN_TOKEN,
    CREDIT_OPERATORS,
    CREDIT_TOKEN,
    FX_RATES,
    LEDGER_ROLE,
    LEDGER_ROLE_PASSWORD,
    LEDGER_TOKEN,
    MERCHANT,
    MERCHANT_TOKEN,
    MT5_WORKER_ENV,
    OPERATORS,
    PSP_API_KEY,
    RELAY_ENV,
    WEBHOOK_SECRET,
)

if TYPE_CHECKING:
    from backbone.testing.system import System


def start_gateway(system: System) -> None:
    url, port = system.new_database("webhook_gateway"), free_port()
    system.urls.gateway = f"http://127.0.0.1:{port}"
    tokens = system.workdir / "gateway-api-tokens"  # the console reads a payment's receipts
    tokens.write_text(f"console receipts:view,operators:assert sha256:{_sha(CONSOLE_TOKEN)}\n")
    env = {
        "DATABASE_URL": url,
        "SIMPSP_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "HTTP_PORT": str(port),
        "GATEWAY_API_TOKENS_FILE": str(tokens),
    }
    system.spawn("gateway-api", ["-m", "webhook_gateway", "api"], env)
    system.spawn("gateway-relay", ["-m", "webhook_gateway", "relay"], {"DATABASE_URL": url, **RELAY_ENV})


def start_psp(system: System) -> None:
    api, control = free_port(), free_port()
    system.urls.psp, system.urls.psp_control = f"http://127.0.0.1:{api}", f"http://127.0.0.1:{control}"
    env = {
        "DATABASE_URL": system.new_database("psp_sim", migrated=False),
        "PSP_SIM_API_KEY": PSP_API_KEY,
        "PSP_SIM_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "PSP_SIM_WEBHOOK_URL": f"{system.urls.gateway}/providers/simpsp/webhooks",
        "PSP_SIM_API_PORT": str(api),
        "PSP_SIM_CONTROL_PORT": str(control),
        "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS": "100",
        "PSP_SIM_WEBHOOK_BACKOFF_MAX_MS": "1000",
        "PSP_SIM_WEBHOOK_POLL_INTERVAL_MS": "50",
    }
    system.spawn("psp_sim", ["-m", "psp_sim"], env)
    catch_up = {
        "DATABASE_URL": system.dbs["webhook_gateway"],
        "PSP_BASE_URL": system.urls.psp,
        "PSP_API_KEY": PSP_API_KEY,
        **CATCH_UP_ENV,
    }
    system.spawn("gateway-catch-up", ["-m", "webhook_gateway", "catch-up"], catch_up)


def start_payment_state(system: System) -> None:
    url, port = system.new_database("payment_state"), free_port()
    system.urls.payment_state = f"http://127.0.0.1:{port}"
    db = {"DATABASE_URL": url}
    psp = {"PSP_BASE_URL": system.urls.psp, "PSP_API_KEY": PSP_API_KEY, "PSP_TIMEOUT_MS": "2000"}
    operators = system.workdir / "payment_state-operators"  # the console acts on its dead letters
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
    system.spawn("payment_state-api", ["-m", "payment_state", "api"], api_env)
    # a claim left by a killed worker expires in 10 s instead of the product's 60 s; still above
    # batch / concurrency x 2 x PSP_TIMEOUT_MS (16 / 8 x 2 x 2 s), as the setting asks
    worker = {**db, **psp, "EXECUTOR_LEASE_MS": "10000"}
    system.spawn("payment_state-worker", ["-m", "payment_state", "worker"], worker)
    system.spawn("payment_state-consume", ["-m", "payment_state", "consume"], {**db, **CONSUMER_ENV})
    system.spawn("payment_state-relay", ["-m", "payment_state", "relay"], {**db, **RELAY_ENV})


def start_mt5_credit(system: System) -> None:
    assert system.mt5 is not None
    url, port = system.new_database("mt5_credit"), free_port()
    system.urls.mt5_credit = f"http://127.0.0.1:{port}"
    db = {"DATABASE_URL": url, "FX_RATES": FX_RATES}
    mt5 = {
        "MT5_WEBAPI_URL": system.mt5.url,
        "MT5_MANAGER_LOGIN": str(MANAGER_LOGIN),
        "MT5_MANAGER_PASSWORD": MANAGER_PASSWORD,
        **MT5_WORKER_ENV,
    }
    operators = system.workdir / "mt5_credit-operators"
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
    system.spawn("mt5_credit-api", ["-m", "mt5_credit", "api"], api_env)
    system.spawn("mt5_credit-consume", ["-m", "mt5_credit", "consume"], {**db, **CONSUMER_ENV})
    system.spawn("mt5_credit-worker", ["-m", "mt5_credit", "worker"], {**db, **mt5})
    system.spawn("mt5_credit-relay", ["-m", "mt5_credit", "relay"], {**db, **RELAY_ENV})


def start_ledger(system: System) -> None:
    """The ledger runs as its restricted runtime role (no UPDATE/DELETE), provisioned like production."""
    admin_db_url, port = system.new_database("ledger"), free_port()
    system.urls.ledger = f"http://127.0.0.1:{port}"
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
    tokens = system.workdir / "ledger-tokens"
    digest = hashlib.sha256(LEDGER_TOKEN.encode()).hexdigest()
    console = hashlib.sha256(CONSOLE_TOKEN.encode()).hexdigest()
    tokens.write_text(
        f"system ledger:read,ledger:import sha256:{digest}\n"
        f"console ledger:read,deadletters:view,deadletters:replay,operators:assert sha256:{console}\n"
    )
    system.spawn("ledger-consume", ["-m", "ledger", "consume"], {**db, **CONSUMER_ENV})
    system.spawn("ledger-relay", ["-m", "ledger", "relay"], {**db, **RELAY_ENV})
    api_env = {**db, "LEDGER_HTTP_PORT": str(port), "LEDGER_API_TOKENS_FILE": str(tokens)}
    system.spawn("ledger-api", ["-m", "ledger", "api"], api_env)


def start_reconciler(system: System) -> None:
    db = {"DATABASE_URL": system.new_database("reconciler")}
    system.spawn("reconciler-consume", ["-m", "reconciler", "consume"], {**db, **CONSUMER_ENV})
    system.spawn("reconciler-relay", ["-m", "reconciler", "relay"], {**db, **RELAY_ENV})
    tokens = system.workdir / "reconciler-operators"
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
    system.urls.reconciler = f"http://127.0.0.1:{port}"
    api_env = {
        **db,
        "RECON_HTTP_PORT": str(port),
        "RECON_HTTP_HOST": "127.0.0.1",
        "RECON_API_TOKENS_FILE": str(tokens),
    }
    system.spawn("reconciler-api", ["-m", "reconciler", "api"], api_env)
    if system.monitor_after_s is not None:
        monitor_env = {
            "RECON_MONITOR_DATA_DIR": str(system.workdir / "reconciler-monitor-data"),
            "RECON_MONITOR_CREDIT_AFTER_S": str(system.monitor_after_s),
            "RECON_MONITOR_JOURNAL_AFTER_S": str(system.monitor_after_s),
            "RECON_MONITOR_CHECK_INTERVAL_MS": "250",
            "RECON_MONITOR_PARTITIONS": str(system.partitions),  # the namespace's topics
            "RECON_MONITOR_METRICS_PORT": str(free_port()),
        }
        system.spawn("reconciler-monitor", ["-m", "reconciler", "monitor"], monitor_env)


def start_console(system: System) -> None:
    url, port = system.new_database("ops_console"), free_port()
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
    merchants = system.workdir / "console-merchant-tokens"
    merchants.write_text(f"{MERCHANT} {MERCHANT_TOKEN}\n")
    merchants.chmod(0o600)
    credit_merchants = system.workdir / "console-credit-merchant-tokens"
    credit_merchants.write_text(f"{MERCHANT} {CREDIT_TOKEN}\n")
    credit_merchants.chmod(0o600)
    system.urls.console = f"http://127.0.0.1:{port}"
    env = {
        "DATABASE_URL": url,
        "CONSOLE_HTTP_HOST": "127.0.0.1",
        "CONSOLE_HTTP_PORT": str(port),
        "CONSOLE_RECONCILER_URL": system.urls.reconciler,
        "CONSOLE_RECONCILER_TOKEN": CONSOLE_TOKEN,
        "CONSOLE_PAYMENT_STATE_URL": system.urls.payment_state,
        "CONSOLE_MT5_CREDIT_URL": system.urls.mt5_credit,
        "CONSOLE_MT5_CREDIT_TOKEN": CONSOLE_TOKEN,
        "CONSOLE_CREDIT_MERCHANT_TOKENS_FILE": str(credit_merchants),
        **(
            {"CONSOLE_LEDGER_URL": system.urls.ledger, "CONSOLE_LEDGER_TOKEN": CONSOLE_TOKEN}
            if system.with_ledger
            else {}
        ),
        "CONSOLE_MERCHANT_TOKENS_FILE": str(merchants),
        "CONSOLE_PAYMENT_STATE_TOKEN": CONSOLE_TOKEN,
        "CONSOLE_GATEWAY_URL": system.urls.gateway,
        "CONSOLE_GATEWAY_TOKEN": CONSOLE_TOKEN,
        "CONSOLE_COOKIE_SECURE": "false",  # plain http on 127.0.0.1
    }
    system.spawn("ops-console", ["-m", "ops_console", "serve"], env)


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
