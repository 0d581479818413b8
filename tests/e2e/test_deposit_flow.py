"""End to end, every service as a real process: a card deposit from the broker's server to the
client's MT5 account and the books, through the PSP simulator's signed webhooks, the gateway,
payment-state, mt5-credit (with the MT5 simulator) and the ledger; with the faults the design is
built for: 3-D Secure, a duplicated webhook, an MT5 timeout after apply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("system")
    with System(stack, workdir).start() as running:
        yield running


def test_card_deposit_is_credited_once_end_to_end(system: System) -> None:
    """A plain card deposit: authorized, captured (webhooks through the gateway), credited once on MT5
    with comment dep:<credit id>, the credit's deal ticket recorded."""
    system.open_mt5_account(7101, "cust-a")
    ref, payment_id = system.create_deposit("cust-a", 7101, 25_000, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    system.wait_payment(payment_id, "CAPTURED")
    (credit,) = system.wait_credits(ref, ["done"])
    (deal,) = system.deals(f"dep:{credit['credit_id']}")
    assert (deal["Profit"], int(deal["Deal"])) == ("250.00", credit["deal_ticket"])
    wait_until(lambda: len(system.journals(payment_id)) == 2, 60, "captured + credited journals")
    journals = system.journals(payment_id)
    assert sorted(j["reference"].split(":")[0] for j in journals) == ["capture", "mt5-credit"]


def test_three_d_secure_then_a_duplicated_webhook_credit_once(system: System) -> None:
    """3-D Secure: REQUIRES_ACTION is not a failure; after the customer completes it the payment is
    authorized. The capture's webhook is delivered three times: still one credit, one deal."""
    system.open_mt5_account(7102, "cust-b")
    ref, payment_id = system.create_deposit("cust-b", 7102, 10_000, "pm_card_3ds_required")
    intent_id = system.wait_payment(payment_id, "REQUIRES_ACTION")["provider_payment_id"]
    status, _ = system.psp_write(
        f"/v1/test_helpers/payment_intents/{intent_id}/complete_action", {"outcome": "succeeded"}
    )
    assert status == 200
    system.wait_payment(payment_id, "AUTHORIZED")
    system.psp_fault(kind="webhook_duplicate", event_type="payment_intent.succeeded", copies=3, count=1)
    system.capture(payment_id)
    system.wait_payment(payment_id, "CAPTURED")
    (credit,) = system.wait_credits(ref, ["done"])
    assert len(system.deals(f"dep:{credit['credit_id']}")) == 1


def test_mt5_timeout_after_apply_is_settled_by_the_resolver(system: System) -> None:
    """MT5 applies the credit but the answer never arrives: the credit goes unknown, the resolver finds
    the deal by its comment and marks it done: one deal, never two, one MT5 call."""
    assert system.mt5 is not None
    system.open_mt5_account(7103, "cust-c")
    system.mt5.control.arm_fault(
        kind="hang_after_apply", endpoint="trade/balance", login=7103, count=1, delay_ms=3000
    )
    ref, payment_id = system.create_deposit("cust-c", 7103, 5_000, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    (credit,) = system.wait_credits(ref, ["done"], timeout_s=90)
    assert credit["attempts"] == 1
    assert len(system.deals(f"dep:{credit['credit_id']}")) == 1


def test_a_dispute_whose_webhook_never_comes_is_caught_up_and_debited(system: System) -> None:
    """The PSP drops the dispute's webhook for good: the gateway's catch-up stores the dispute from
    the PSP's events list (a receipt ``fetched``, not signed), and the chargeback reaches MT5 as one
    debit, exactly as if the webhook had come."""
    system.open_mt5_account(7104, "cust-d")
    ref, payment_id = system.create_deposit("cust-d", 7104, 12_000, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    intent = system.wait_payment(payment_id, "CAPTURED")
    system.wait_credits(ref, ["done"])
    system.psp_fault(kind="webhook_drop", event_type="charge.dispute.created", count=1)
    psp_id = intent["provider_payment_id"]
    dispute = f"{system.urls.psp_control}/control/payment_intents/{psp_id}/dispute"
    status, body = system.http("POST", dispute, {})
    assert status in (200, 201), body
    credit, debit = system.wait_credits(ref, ["done", "done"], timeout_s=90)
    assert (debit["kind"], debit["debit_reason"], debit["amount_minor"]) == ("debit", "chargeback", 12_000)
    with psycopg.connect(system.dbs["webhook_gateway"]) as conn:
        rows = conn.execute(
            "SELECT signature_result FROM provider_events"
            " WHERE provider_event_type = 'charge.dispute.created' AND provider_payment_id = %s",
            (psp_id,),
        ).fetchall()
    assert rows == [("fetched",)]
    assert credit["kind"] == "credit"
