"""Every HTTP API fuzzed from its OpenAPI document against the real running product (issue 34).

The whole product runs as real processes on real Kafka and PostgreSQL (``System``, with the
reconciler, the console and both simulators). Each API is fuzzed by ``backbone.testing.fuzz``:
every operation of its document, ``FUZZ_EXAMPLES`` inputs per generation mode (positive and
negative) from the fixed seed ``FUZZ_SEED``, never shrunk, authenticated as each route's callers
are. Two promises are asserted on every answer: no 5xx, and no 4xx that changed the service's
database (a digest of every table after each answer; the tables a refusal is meant to append to,
an audit of refused acts or an idempotency key keeping its answer, may only grow).

So that every change to a database is the answer's own, only the fuzzed APIs run: the workers,
consumers, relays and the gateway's catch-up are stopped after the system starts, the PSP queues
its webhooks without a URL to send them to, and settles payouts at their create.

Locally, with more inputs: ``FUZZ_EXAMPLES=50 .venv/bin/python -m pytest tests/openapi/test_fuzz.py``
(``FUZZ_SEED`` picks another fixed seed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import requests
from backbone.mt5 import auth as mt5_auth
from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD
from backbone.testing.fuzz import Target, fuzz
from backbone.testing.stack import REPO_ROOT, Stack
from backbone.testing.system import System
from backbone.testing.system_config import (
    CONSOLE_PASSWORD,
    CONSOLE_TOKEN,
    CREDIT_ADMIN_TOKEN,
    CREDIT_TOKEN,
    LEDGER_TOKEN,
    MERCHANT,
    MERCHANT_TOKEN,
    PSP_API_KEY,
    WEBHOOK_SECRET,
)

pytestmark = pytest.mark.integration

EXAMPLES: Final = int(os.environ.get("FUZZ_EXAMPLES", "4"))
SEED: Final = int(os.environ.get("FUZZ_SEED", "34"))
# 1: a 5xx answering a body the shared body reader is to refuse fails too (see backbone.testing.fuzz)
SERVICES: Final = REPO_ROOT / "services"
# what runs while the APIs are fuzzed: the APIs themselves (and the MT5 simulator, apart)
FUZZED_PROCESSES: Final = frozenset(
    {
        "gateway-api",
        "psp_sim",
        "payment_state-api",
        "mt5_credit-api",
        "ledger-api",
        "reconciler-api",
        "ops-console",
    }
)
ALL_OPERATOR_PERMISSIONS: Final = (
    "deadletters:view,deadletters:replay,deposits:view,withdrawals:view,withdrawals:prepare,"
    "withdrawals:approve,ledger:read,cases:view,cases:work,repairs:propose,repairs:approve,receipts:view"
)


def console_acting() -> dict[str, str]:
    """The console's token acting for an operator holding whatever a service grants the console."""
    return {
        "Authorization": f"Bearer {CONSOLE_TOKEN}",
        "X-Operator": "fuzz",
        "X-Operator-Permissions": ALL_OPERATOR_PERMISSIONS,
        "X-Operator-Merchants": MERCHANT,
    }


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The product with only its APIs left running (see the module docstring)."""
    workdir: Path = tmp_path_factory.mktemp("fuzz-system")
    quiet_psp = {"PSP_SIM_WEBHOOK_URL": "", "PSP_SIM_PAYOUT_SETTLE_DELAY_MS": "0"}
    started = System(
        stack, workdir, with_reconciler=True, with_console=True, extra_env={"psp_sim": quiet_psp}
    )
    with started.start() as running:
        for name, proc in running.procs.items():
            if name not in FUZZED_PROCESSES:
                proc.kill()
        yield running


@pytest.fixture(scope="module")
def console_session(system: System) -> dict[str, str]:
    """A logged-in console session: its cookie and its CSRF token."""
    http = requests.Session()
    page = http.get(f"{system.urls.console}/login", timeout=15)
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None, page.text[:500]
    form = {"username": "alice", "password": CONSOLE_PASSWORD, "csrf": token.group(1)}
    answer = http.post(f"{system.urls.console}/login", data=form, timeout=15, allow_redirects=False)
    assert answer.status_code == 303, answer.text[:500]
    cases = http.get(f"{system.urls.console}/cases", timeout=15)
    csrf = re.search(r'name="csrf" value="([^"]+)"', cases.text)
    assert cases.status_code == 200 and csrf is not None, cases.text[:500]
    return {"cookie": http.cookies["console_session"], "csrf": csrf.group(1)}


def _signed(case: Any, headers: dict[str, str]) -> None:
    """A webhook signed as the PSP signs it, over the bytes requests will send for a JSON body."""
    if case.operation.path.endswith("/webhooks") and isinstance(case.body, dict | list):
        raw = json.dumps(case.body, allow_nan=False).encode()
        t = int(time.time())
        digest = hmac.new(WEBHOOK_SECRET.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
        headers["Simpsp-Signature"] = f"t={t},v1={digest}"


def _ledger_caller(case: Any, headers: dict[str, str]) -> None:
    """The ledger's reads and import with the system's token; its dead letters as the console."""
    headers.update(
        console_acting()
        if case.operation.path.startswith("/v1/dead-letters")
        else {"Authorization": f"Bearer {LEDGER_TOKEN}"}
    )


class Mt5Session:
    """A Web API connection authenticated before each case (the session is the connection)."""

    def __init__(self, url: str) -> None:
        self.url, self.http = url, requests.Session()
        self.pw_hash = mt5_auth.password_hash(MANAGER_PASSWORD)

    def authenticate(self, _: Any, __: dict[str, str]) -> None:
        self.http.close()  # a fresh connection: a case may have closed or spoilt the last one
        start = {"version": "3470", "agent": "fuzz", "login": str(MANAGER_LOGIN), "type": "manager"}
        challenge = self.http.get(f"{self.url}/api/auth/start", params=start, timeout=15).json()
        answer = {
            "srv_rand_answer": mt5_auth.rand_answer(self.pw_hash, challenge["srv_rand"]),
            "cli_rand": mt5_auth.new_cli_rand(),
        }
        done = self.http.get(f"{self.url}/api/auth/answer", params=answer, timeout=15).json()
        assert done["retcode"].startswith("0 "), done


def _mt5_refused(response: Any) -> bool:
    """A Web API refusal: an HTTP 4xx, or an error retcode in a 200."""
    if 400 <= response.status_code < 500:
        return True
    try:
        return not str(json.loads(response.content)["retcode"]).startswith("0 ")
    except (ValueError, KeyError, TypeError):
        return False


def _with_csrf(console: dict[str, str]) -> Callable[[Any, dict[str, str]], None]:
    """The session's CSRF token in every form the fuzz sends the console."""

    def put(case: Any, _: dict[str, str]) -> None:
        if isinstance(case.body, dict):
            case.body["csrf"] = console["csrf"]

    return put


def _psp_kept_quiet(control_url: str) -> Callable[[str], None]:
    """After each control call: no fault left armed (it would turn the next call into a 5xx on
    purpose), and the PSP kept quiet (see the module docstring)."""

    def restore(label: str) -> None:
        if label == "PATCH /control/config":
            body = {"webhook_url": "", "payout_settle_delay_ms": 0}
            requests.patch(f"{control_url}/control/config", json=body, timeout=15)
        if "faults" in label or "reset" in label:
            requests.delete(f"{control_url}/control/faults", timeout=15)

    return restore


def _mt5_faults_cleared(control_url: str) -> Callable[[str], None]:
    def restore(label: str) -> None:
        if "faults" in label or "reset" in label:
            requests.delete(f"{control_url}/control/faults", timeout=15)

    return restore


def targets(system: System, console: dict[str, str]) -> dict[str, Target]:
    """Every API of the product and both simulators, as its callers call it."""
    assert system.mt5 is not None
    mt5 = Mt5Session(system.mt5.url)

    def target(name: str, document: str, url: str, db: str, **more: Any) -> Target:
        return Target(name, SERVICES / document, url, system.dbs[db], **more)

    return {
        "payment_state": target(
            "payment_state", "payment_state/openapi.yaml", system.urls.payment_state, "payment_state",
            headers_by_scheme={
                "bearer": {"Authorization": f"Bearer {MERCHANT_TOKEN}"}, "operator": console_acting(),
            },
            refusal_logs=frozenset({"idempotency_keys"}),
        ),
        "mt5_credit": target(
            "mt5_credit", "mt5_credit/openapi.yaml", system.urls.mt5_credit, "mt5_credit",
            headers_by_scheme={
                "merchant": {"Authorization": f"Bearer {CREDIT_TOKEN}"},
                "admin": {"Authorization": f"Bearer {CREDIT_ADMIN_TOKEN}"},
                "operator": console_acting(),
            },
            refusal_logs=frozenset({"withdrawal_audit"}),
        ),
        "ledger": target(
            "ledger", "ledger/openapi.yaml", system.urls.ledger, "ledger", prepare=_ledger_caller
        ),
        "reconciler": target(
            "reconciler", "reconciler/openapi.yaml", system.urls.reconciler, "reconciler",
            headers_by_scheme={"operator": console_acting()}, refusal_logs=frozenset({"audit"}),
        ),
        "webhook_gateway": target(
            "webhook_gateway", "webhook_gateway/openapi.yaml", system.urls.gateway, "webhook_gateway",
            headers_by_scheme={"operator": console_acting()}, prepare=_signed,
        ),
        "ops_console": target(
            "ops_console", "ops_console/openapi.yaml", system.urls.console, "ops_console",
            cookies={"console_session": console["cookie"]}, prepare=_with_csrf(console),
            refusal_logs=frozenset({"audit"}), last=("POST /logout",),
        ),
        "psp_sim": target(
            "psp_sim", "psp_sim/openapi.yaml", system.urls.psp, "psp_sim",
            headers_by_scheme={"apiKey": {"Authorization": f"Bearer {PSP_API_KEY}"}},
            refusal_logs=frozenset({"idempotency_keys"}),
        ),
        "psp_sim_control": target(
            "psp_sim_control", "psp_sim/openapi-control.yaml", system.urls.psp_control, "psp_sim",
            after_each=_psp_kept_quiet(system.urls.psp_control),
        ),
        "mt5_sim": target(
            "mt5_sim", "mt5_sim/openapi.yaml", system.mt5.url, "mt5_sim",
            prepare=mt5.authenticate, session=mt5.http, refused=_mt5_refused,
        ),
        "mt5_sim_control": target(
            "mt5_sim_control", "mt5_sim/openapi-control.yaml", system.mt5.control.base_url, "mt5_sim",
            after_each=_mt5_faults_cleared(system.mt5.control.base_url),
        ),
    }  # fmt: skip  # packed: a few items a line read better than one each


# the simulators' control APIs last: they can reset what the other APIs' runs created
ORDER: Final = (
    "payment_state", "mt5_credit", "ledger", "reconciler", "webhook_gateway", "ops_console", "psp_sim",
    "mt5_sim", "psp_sim_control", "mt5_sim_control",
)  # fmt: skip  # packed: a few items a line read better than one each


@pytest.mark.parametrize("name", ORDER)
def test_no_5xx_and_no_refusal_changes_the_database(
    name: str, system: System, console_session: dict[str, str]
) -> None:
    """Every operation of the API's document, positive and negative inputs from the fixed seed:
    never a 5xx (nor a dropped connection), and never a 4xx (or, at MT5, an error retcode) after
    which a table of the service's database changed (beyond its refusal logs growing)."""
    started = time.monotonic()
    target = targets(system, console_session)[name]
    outcome = fuzz(target, examples=EXAMPLES, seed_value=SEED)
    took_s = time.monotonic() - started
    print(f"fuzz {name}: {outcome.calls} calls in {took_s:.1f} s, {len(outcome.failures)} failures,")
    print(f"  answers by status {outcome.statuses}")
    assert outcome.calls > 0
    assert not outcome.failures, "\n".join(outcome.failures)
