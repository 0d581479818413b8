"""A repair of the real product, end to end on real processes: MT5 refuses a deposit's credit, the
day's run finds it not credited; alice proposes an MT5 credit through the reconciler's API, her own
approval is refused, bob approves; the reconciler's relay sends ExecuteRepair, mt5-credit credits
the account through its normal flow (its own deal comment), the ledger books it, mt5-credit answers
the repair, and the re-run of the day is clean. Money moved once: one deal, one credit journal."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def running(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("repair-system")
    with System(stack, workdir, with_reconciler=True).start() as system:
        yield system


def test_a_refused_credit_is_repaired_by_two_people_and_the_day_reconciles(running: System) -> None:
    """The whole repair path on the running product (see the module's docstring)."""
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
    status, cases = running.recon_api("bob", "GET", "/v1/cases?class=not_credited&status=open")
    [case] = [c for c in cases["cases"] if payment_id in c["summary"] or ref in c["summary"]] or cases[
        "cases"
    ]
    body = {
        "repair_type": "mt5_credit",
        "reason": "MT5 refused the credit; the account is fine now",
        "mt5_login": login,
    }
    status, proposed = running.recon_api("alice", "POST", f"/v1/cases/{case['id']}/repairs", body)
    assert status == 201, proposed
    rid, digest = proposed["repair_id"], proposed["command_digest"]
    status, refused = running.recon_api(
        "alice", "POST", f"/v1/repairs/{rid}/approve", {"command_digest": digest}
    )
    assert (status, refused["error"]) == (403, "maker_cannot_approve")
    status, approved = running.recon_api(
        "bob", "POST", f"/v1/repairs/{rid}/approve", {"command_digest": digest}
    )
    assert (status, approved["status"]) == (200, "sent")

    def repair_status() -> str:
        return str(running.recon_api("bob", "GET", f"/v1/repairs/{rid}")[1]["status"])

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
    detail = running.recon_api("bob", "GET", f"/v1/cases/{case['id']}")[1]
    assert detail["status"] == "resolved"
    assert [h["action"] for h in detail["history"]].count("repair_executed") == 1
    credit_journals = [j for j in running.journals(payment_id) if j["reference"].startswith("mt5-credit:")]
    assert len(credit_journals) == 1 and len(running.mt5.control.deals(login=login)) == 1
