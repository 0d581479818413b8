"""A repair of the real product, end to end on real processes: MT5 refuses a deposit's credit, the
day's run finds it not credited; alice proposes an MT5 credit through the reconciler's API, her own
approval is refused, bob approves; the reconciler's relay sends ExecuteRepair, mt5-credit credits
the account through its normal flow (its own deal comment), the ledger books it, mt5-credit answers
the repair, and the re-run of the day is clean. Money moved once: one deal, one credit journal."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from backbone.testing.system import System
from backbone.tokens import token_hash

pytestmark = pytest.mark.integration
ALICE, BOB = "alice-e2e-token-0123456789", "bob-e2e-token-0123456789"


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[System, Api]]:
    workdir: Path = tmp_path_factory.mktemp("repair-system")
    with System(stack, workdir, with_reconciler=True).start() as running:
        tokens = workdir / "operators"
        tokens.write_text(
            f"alice cases:view,repairs:propose,repairs:approve sha256:{token_hash(ALICE)}\n"
            f"bob cases:view,repairs:approve sha256:{token_hash(BOB)}\n"
        )
        port = free_port()
        env = {
            **running.reconciler_env(),
            "RECON_HTTP_PORT": str(port),
            "RECON_HTTP_HOST": "127.0.0.1",
            "RECON_API_TOKENS_FILE": str(tokens),
        }
        proc = Proc(["-m", "reconciler", "api"], env, workdir / "reconciler-api.log")
        api = Api(port)

        def up() -> bool:
            try:
                return urllib.request.urlopen(f"{api.base}/readyz", timeout=2).status == 200
            except OSError:
                return False

        wait_until(up, 30, "the reconciler API", alive=lambda: proc.popen.poll() is None)
        try:
            yield running, api
        finally:
            proc.terminate()


def test_a_refused_credit_is_repaired_by_two_people_and_the_day_reconciles(
    system: tuple[System, Api],
) -> None:
    """The whole repair path on the running product (see the module's docstring)."""
    running, api = system
    assert running.mt5 is not None
    day = dt.datetime.now(dt.UTC).date().isoformat()
    login = 7301
    running.open_mt5_account(login, "cust-rep")
    running.mt5.control.arm_fault(kind="retcode", endpoint="trade/balance", login=login, count=1, retcode=3)
    ref, payment_id = running.create_deposit("cust-rep", login, 25_000, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    running.wait_credits(ref, ["failed"])
    wait_until(lambda: len(running.journals(payment_id)) >= 1, 60, "the capture's journal")

    def found() -> list[str]:
        return sorted(f["case_class"] for f in running.reconcile(day)["findings"])

    wait_until(lambda: found() == ["not_credited"], 60, "the run to find the deposit not credited")
    status, cases = api.call("GET", "/v1/cases?class=not_credited&status=open", BOB)
    [case] = [c for c in cases["cases"] if payment_id in c["summary"] or ref in c["summary"]] or cases[
        "cases"
    ]
    body = {
        "repair_type": "mt5_credit",
        "reason": "MT5 refused the credit; the account is fine now",
        "mt5_login": login,
    }
    status, proposed = api.call("POST", f"/v1/cases/{case['id']}/repairs", ALICE, body)
    assert status == 201, proposed
    rid, digest = proposed["repair_id"], proposed["command_digest"]
    status, refused = api.call("POST", f"/v1/repairs/{rid}/approve", ALICE, {"command_digest": digest})
    assert (status, refused["error"]) == (403, "maker_cannot_approve")
    status, approved = api.call("POST", f"/v1/repairs/{rid}/approve", BOB, {"command_digest": digest})
    assert (status, approved["status"]) == (200, "sent")

    def repair_status() -> str:
        return str(api.call("GET", f"/v1/repairs/{rid}", BOB)[1]["status"])

    wait_until(lambda: repair_status() == "executed", 90, "mt5-credit to execute and answer the repair")
    credits = running.wait_credits(ref, ["failed", "done"])
    repaired = credits[1]
    deals = running.mt5.control.deals(login=login)
    assert [d["Comment"] for d in deals] == [f"dep:{repaired['credit_id']}"]
    wait_until(
        lambda: any(
            j["reference"] == f"mt5-credit:{repaired['credit_id']}" for j in running.journals(payment_id)
        ),
        60,
        "the ledger to book the repair credit",
    )
    wait_until(lambda: running.reconcile(day)["status"] == "clean", 60, "the re-run to be clean")
    detail = api.call("GET", f"/v1/cases/{case['id']}", BOB)[1]
    assert detail["status"] == "resolved"
    assert [h["action"] for h in detail["history"]].count("repair_executed") == 1
    credit_journals = [j for j in running.journals(payment_id) if j["reference"].startswith("mt5-credit:")]
    assert len(credit_journals) == 1 and len(running.mt5.control.deals(login=login)) == 1
