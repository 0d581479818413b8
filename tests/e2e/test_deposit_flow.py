"""End to end, every service as a real process: a card deposit from the broker's server to the
client's MT5 account and the books, through the PSP simulator's signed webhooks, the gateway,
payment-state, mt5-credit (with the MT5 simulator) and the ledger; with the faults the design is
built for: 3-D Secure, a duplicated webhook, an MT5 timeout after apply."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing import system as sysmod
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("system")
    with System(stack, workdir, with_ledger=False).start() as running:
        yield running


def _key() -> str:
    return f"k-{uuid.uuid4().hex}"


def open_account(system: System, login: int, customer: str) -> None:
    assert system.mt5 is not None
    system.mt5.control.create_account(login, sysmod.MT5_GROUP, balance="0")
    status, _ = system.http(
        "PUT",
        f"{system.urls.mt5_credit}/accounts/{login}",
        {"customer_id": customer, "currency": "USD", "enabled": True},
        token=sysmod.CREDIT_ADMIN_TOKEN,
    )
    assert status == 200


def deposit(system: System, customer: str, login: int, amount_minor: int, card: str) -> tuple[str, str]:
    """Intent (server side) + payment; returns (deposit_reference, payment_id)."""
    status, intent = system.http(
        "POST",
        f"{system.urls.mt5_credit}/deposit-intents",
        {"customer_id": customer, "mt5_login": login, "amount_minor": amount_minor, "currency": "USD"},
        token=sysmod.CREDIT_TOKEN,
        key=_key(),
    )
    assert status == 201, intent
    ref = intent["deposit_reference"]
    status, payment = system.http(
        "POST",
        f"{system.urls.payment_state}/payments",
        {
            "amount_minor": amount_minor,
            "currency": "USD",
            "payment_method_token": card,
            "deposit_reference": ref,
        },
        token=sysmod.MERCHANT_TOKEN,
        key=_key(),
    )
    assert status == 201, payment
    return ref, payment["payment"]["payment_id"] if "payment" in payment else payment["payment_id"]


def payment(system: System, payment_id: str) -> dict[str, Any]:
    status, body = system.http(
        "GET", f"{system.urls.payment_state}/payments/{payment_id}", token=sysmod.MERCHANT_TOKEN
    )
    assert status == 200, body
    return dict(body.get("payment", body))


def wait_payment(system: System, payment_id: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
    wait_until(lambda: payment(system, payment_id)["status"] == status, timeout_s, f"payment {status}")
    return payment(system, payment_id)


def credits(system: System, ref: str) -> list[dict[str, Any]]:
    status, body = system.http(
        "GET", f"{system.urls.mt5_credit}/deposit-intents/{ref}", token=sysmod.CREDIT_TOKEN
    )
    assert status == 200, body
    return list(body["credits"])


def wait_credited(system: System, ref: str, timeout_s: float = 60) -> dict[str, Any]:
    wait_until(lambda: [c["status"] for c in credits(system, ref)] == ["done"], timeout_s, f"credit of {ref}")
    (credit,) = credits(system, ref)
    return credit


def capture(system: System, payment_id: str) -> None:
    status, body = system.http(
        "POST",
        f"{system.urls.payment_state}/payments/{payment_id}/capture",
        {},
        token=sysmod.MERCHANT_TOKEN,
        key=_key(),
    )
    assert status in (200, 202), body


def psp_write(system: System, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return system.http("POST", system.urls.psp + path, body, token=sysmod.PSP_API_KEY, key=_key())


def deals(system: System, comment: str) -> list[dict[str, Any]]:
    assert system.mt5 is not None
    return system.mt5.control.deals(comment=comment)


def test_card_deposit_is_credited_once_end_to_end(system: System) -> None:
    """A plain card deposit: authorized, captured (webhooks through the gateway), credited once on MT5
    with comment dep:<credit id>, the credit's deal ticket recorded."""
    open_account(system, 7101, "cust-a")
    ref, payment_id = deposit(system, "cust-a", 7101, 25_000, "pm_card_visa")
    wait_payment(system, payment_id, "AUTHORIZED")
    capture(system, payment_id)
    wait_payment(system, payment_id, "CAPTURED")
    credit = wait_credited(system, ref)
    (deal,) = deals(system, f"dep:{credit['credit_id']}")
    assert (deal["Profit"], int(deal["Deal"])) == ("250.00", credit["deal_ticket"])


def test_three_d_secure_then_a_duplicated_webhook_credit_once(system: System) -> None:
    """3-D Secure: REQUIRES_ACTION is not a failure; after the customer completes it the payment is
    authorized. Every webhook of the capture is delivered three times: still one credit, one deal."""
    open_account(system, 7102, "cust-b")
    ref, payment_id = deposit(system, "cust-b", 7102, 10_000, "pm_card_3ds_required")
    pending = wait_payment(system, payment_id, "REQUIRES_ACTION")
    intent_id = pending["provider_payment_id"]
    assert (
        psp_write(
            system, f"/v1/test_helpers/payment_intents/{intent_id}/complete_action", {"outcome": "succeeded"}
        )[0]
        == 200
    )
    wait_payment(system, payment_id, "AUTHORIZED")
    status, _ = system.http(
        "POST",
        f"{system.urls.psp_control}/control/faults",
        {"kind": "webhook_duplicate", "event_type": "payment_intent.succeeded", "copies": 3, "count": 1},
    )
    assert status in (200, 201)
    capture(system, payment_id)
    wait_payment(system, payment_id, "CAPTURED")
    credit = wait_credited(system, ref)
    assert len(deals(system, f"dep:{credit['credit_id']}")) == 1


def test_mt5_timeout_after_apply_is_settled_by_the_resolver(system: System) -> None:
    """MT5 applies the credit but the answer never arrives: the credit goes unknown, the resolver finds
    the deal by its comment and marks it done: one deal, never two."""
    open_account(system, 7103, "cust-c")
    assert system.mt5 is not None
    system.mt5.control.arm_fault(
        kind="hang_after_apply", endpoint="trade/balance", login=7103, count=1, delay_ms=3000
    )
    ref, payment_id = deposit(system, "cust-c", 7103, 5_000, "pm_card_visa")
    wait_payment(system, payment_id, "AUTHORIZED")
    capture(system, payment_id)
    credit = wait_credited(system, ref, timeout_s=90)
    assert credit["attempts"] == 1
    assert len(deals(system, f"dep:{credit['credit_id']}")) == 1
