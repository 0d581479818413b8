"""Withdrawals end to end, every service a real process (docs/adr/0008; seed 000's failure table
mirrored): the broker's server asks, two operators approve, mt5-credit debits MT5 first (deal
comment ``wdr:<id>``), payment-state makes the one payout, the ledger books each step. Each test
counts MT5 deals per reference and PSP payouts per reference: exactly one where money moved."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System
from backbone.testing.system_client import new_key

pytestmark = pytest.mark.integration
CARD = "pm_card_visa"
_logins = iter(range(7601, 7699))


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("withdrawal-system")
    with System(stack, workdir).start() as running:
        yield running


def _funded(system: System, amount_minor: int = 50_000) -> tuple[int, str]:
    """A client with an MT5 account credited by a card deposit of ``amount_minor``: (login, customer)."""
    login = next(_logins)
    customer = f"cust-w{login}"
    system.open_mt5_account(login, customer)
    ref, payment_id = system.create_deposit(customer, login, amount_minor, CARD)
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    system.wait_payment(payment_id, "CAPTURED")
    system.wait_credits(ref, ["done"])
    return login, customer


def _requested(system: System, login: int, customer: str, amount_minor: int = 10_000) -> str:
    status, body = system.request_withdrawal(customer, login, amount_minor, CARD)
    assert status == 201, body
    assert (body["status"], body["held_minor"]) == ("held", amount_minor)
    return str(body["withdrawal_id"])


def _mt5_deals(system: System, withdrawal: dict[str, Any]) -> list[dict[str, Any]]:
    return system.deals(withdrawal["debit"]["comment"])


def test_bad_requests_are_refused_and_nothing_is_held(system: System) -> None:
    """Another client's login, a disabled account, more than the free margin, a currency the account
    does not have, a card the client never paid with, a card number instead of a token: a clear 4xx;
    nothing held, nothing debited."""
    login, customer = _funded(system, 20_000)
    other_login, _ = _funded(system, 20_000)
    disabled = next(_logins)
    system.open_mt5_account(disabled, customer)
    status, _ = system.http(
        "PUT",
        f"{system.urls.mt5_credit}/accounts/{disabled}",
        {"customer_id": customer, "currency": "USD", "enabled": False},
        token="system-credit-admin-0123456789",
    )
    assert status == 200
    cases = [
        (dict(login=other_login), 422, "login_not_customers"),
        (dict(login=disabled), 422, "account_disabled"),
        (dict(amount_minor=20_001), 422, "insufficient_free_margin"),
        (dict(currency="EUR"), 422, "currency_mismatch"),
        (dict(card="pm_card_mastercard"), 422, "unknown_destination"),
    ]
    for changes, expected_status, code in cases:
        args: dict[str, Any] = {
            "login": login,
            "amount_minor": 5_000,
            "currency": "USD",
            "card": CARD,
            **changes,
        }
        status, body = system.request_withdrawal(
            customer, args["login"], args["amount_minor"], args["card"], args["currency"]
        )
        assert (status, body["error"]["code"]) == (expected_status, code), (changes, body)
    status, body = system.request_withdrawal(customer, login, 5_000, "4242424242424242")
    assert status == 400, body  # a card number never reaches a handler
    status, listed = system.credit_api("alice", "GET", "/v1/withdrawals")
    assert status == 200
    assert [w for w in listed["withdrawals"] if w["mt5_login"] in (login, disabled)] == []
    assert system.deals("wdr:") == [] or all(
        not d["Comment"].startswith("wdr:") for d in system.deals("wdr:")
    )


def test_a_withdrawal_needs_two_people_and_a_repeat_request_is_the_same_one(system: System) -> None:
    """The same Idempotency-Key replays the same withdrawal (200); the preparer's own approval is
    refused (403); bob approves the digest alice prepared; MT5 is debited once (wdr:<id>) and the
    payout is asked (paid_out or later)."""
    login, customer = _funded(system)
    key = new_key()
    status, first = system.request_withdrawal(customer, login, 12_000, CARD, key=key)
    assert status == 201, first
    status, again = system.request_withdrawal(customer, login, 12_000, CARD, key=key)
    assert (status, again["withdrawal_id"]) == (200, first["withdrawal_id"])
    wid = first["withdrawal_id"]
    status, prepared = system.credit_api("alice", "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "ok"})
    assert status == 200, prepared
    body = {"command_digest": prepared["command_digest"], "reason": "mine"}
    status, refused = system.credit_api("alice", "POST", f"/v1/withdrawals/{wid}/approve", body)
    assert (status, refused["error"]["code"]) == (403, "same_person")
    status, approved = system.credit_api("bob", "POST", f"/v1/withdrawals/{wid}/approve", body)
    assert (status, approved["status"]) == (200, "approved")
    wait_until(lambda: system.withdrawal(wid)["status"] not in ("approved",), 60, "the MT5 debit")
    done = system.withdrawal(wid)
    assert done["status"] in ("paid_out", "paid"), done
    [deal] = _mt5_deals(system, done)
    assert deal["Profit"] == "-120.00" and int(deal["Login"]) == login


def test_two_approvals_racing_one_wins(system: System) -> None:
    """bob and alice's colleague approve the same prepared withdrawal at once over HTTP: one 200,
    one 409; one debit row, one deal."""
    login, customer = _funded(system)
    wid = _requested(system, login, customer)
    status, prepared = system.credit_api("alice", "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "ok"})
    assert status == 200
    body = {"command_digest": prepared["command_digest"], "reason": "ok"}
    answers: list[int] = []
    barrier = threading.Barrier(2)

    def approve() -> None:
        barrier.wait()
        answers.append(system.credit_api("bob", "POST", f"/v1/withdrawals/{wid}/approve", body)[0])

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 409]
    wait_until(lambda: system.withdrawal(wid)["status"] != "approved", 60, "the MT5 debit")
    assert len(_mt5_deals(system, system.withdrawal(wid))) == 1


@pytest.mark.parametrize("failpoint", ["mt5_credit.after_claim", "mt5_credit.after_mt5_call"])
def test_worker_killed_after_the_claim_or_the_mt5_call_debits_once(system: System, failpoint: str) -> None:
    """The worker SIGKILLs itself right after claiming the debit, or right after MT5 applied it
    (before recording it): the lease runs out, the row is unknown, the lookup by wdr:<id> decides;
    exactly one deal either way, then the payout is asked."""
    login, customer = _funded(system)
    system.restart("mt5_credit-worker", BACKBONE_FAILPOINTS=f"{failpoint}=kill")
    try:
        wid = _requested(system, login, customer)
        system.approve_withdrawal(wid)
        wait_until(
            lambda: system.procs["mt5_credit-worker"].popen.poll() is not None, 60, "the worker to die"
        )
    finally:
        system.restart("mt5_credit-worker", BACKBONE_FAILPOINTS="")
    wait_until(lambda: system.withdrawal(wid)["status"] in ("paid_out", "paid"), 90, "debit settled")
    done = system.withdrawal(wid)
    assert len(_mt5_deals(system, done)) == 1, done


def test_mt5_timeout_after_apply_is_looked_up_not_sent_again(system: System) -> None:
    """MT5 applies the debit and the answer never comes: unknown, then the lookup finds the deal;
    one deal, then the payout."""
    assert system.mt5 is not None
    login, customer = _funded(system)
    system.mt5.control.arm_fault(
        kind="hang_after_apply", endpoint="trade/balance", login=login, count=1, delay_ms=3000
    )
    wid = _requested(system, login, customer)
    system.approve_withdrawal(wid)
    wait_until(lambda: system.withdrawal(wid)["status"] in ("paid_out", "paid"), 90, "debit settled")
    done = system.withdrawal(wid)
    assert len(_mt5_deals(system, done)) == 1
    assert done["debit"]["attempts"] == 1  # one call: the resolver looked it up, never sent it again


# -- the payout (payment-state and the PSP) ------------------------------------------------------------


def _payouts(system: System, wid: str) -> int:
    status, body = system.http("GET", f"{system.urls.psp_control}/control/payouts/count?reference={wid}")
    assert status == 200, body
    return int(body["count"])


def _approved(system: System, amount_minor: int = 10_000) -> tuple[str, int]:
    login, customer = _funded(system)
    wid = _requested(system, login, customer, amount_minor)
    return wid, login


def test_a_withdrawal_is_paid_out_once_and_the_books_follow(system: System) -> None:
    """Approved by two: one wdr: deal, one PSP payout with our reference, status paid; the ledger books
    the debit and the payout, and nothing stays in transit for it."""
    wid, login = _approved(system)
    system.approve_withdrawal(wid)
    done = system.wait_withdrawal(wid, "paid", timeout_s=90)
    assert len(_mt5_deals(system, done)) == 1 and _payouts(system, wid) == 1
    assert system.mt5 is not None
    assert system.mt5.control.account(login)["balance"] == "400.00"

    def booked() -> list[str]:
        return sorted(j["reference"].split(":")[0] for j in system.journals(wid))

    wait_until(lambda: len(booked()) >= 2, 60, "the debit's and the payout's journals")
    in_transit = 0
    for journal in system.journals(wid):
        for entry in journal["entries"]:
            if entry["account"].startswith("payouts_in_transit"):
                in_transit += (
                    entry["amount_minor"] if entry["direction"] == "credit" else -entry["amount_minor"]
                )
    assert in_transit == 0, system.journals(wid)


@pytest.mark.parametrize("fault", ["apply_then_fail", "webhook_before_response"])
def test_a_lost_payout_answer_is_found_by_lookup_never_paid_twice(system: System, fault: str) -> None:
    """The PSP makes the payout and the answer is lost (5xx after commit), or its webhook arrives
    before the answer: the operation is resolved by lookup or by the webhook, never by a second
    payout; exactly one payout carries the reference."""
    wid, _ = _approved(system)
    system.psp_fault(kind=fault, operation="payout", reference=wid, count=1)
    system.approve_withdrawal(wid)
    done = system.wait_withdrawal(wid, "paid", timeout_s=120)
    assert _payouts(system, wid) == 1 and len(_mt5_deals(system, done)) == 1


@pytest.mark.parametrize("fault", ["payout_fail", "payout_refuse"])
def test_a_failed_payout_gives_the_money_back_to_mt5_once(system: System, fault: str) -> None:
    """The payout fails after pending (payout.failed), or is refused at create (402): the MT5 debit
    is given back by one credit (wbk:<id>), the account holds what it held before, a case says so."""
    wid, login = _approved(system)
    system.psp_fault(kind=fault, reference=wid, code="card_declined", count=1)
    system.approve_withdrawal(wid)
    done = system.wait_withdrawal(wid, "returned", timeout_s=120)
    assert done["give_back"]["comment"].startswith("wbk:")
    assert len(system.deals(done["give_back"]["comment"])) == 1 and len(_mt5_deals(system, done)) == 1
    assert done["payout_failure"] == "card_declined"
    assert system.mt5 is not None
    assert system.mt5.control.account(login)["balance"] == "500.00"


def test_a_payout_returned_after_paid_is_given_back_once(system: System) -> None:
    """Paid, then the payout comes back days later: one give-back credit; the same return seen again
    (webhook redelivered) gives nothing more."""
    wid, login = _approved(system)
    system.approve_withdrawal(wid)
    system.wait_withdrawal(wid, "paid", timeout_s=90)
    status, listed = system.http(
        "GET", f"{system.urls.psp}/v1/payouts?reference={wid}", token="sk_test_system_0123456789"
    )
    assert status == 200, listed
    [payout] = listed["data"]
    status, body = system.http("POST", f"{system.urls.psp_control}/control/payouts/{payout['id']}/return", {})
    assert status == 200, body
    done = system.wait_withdrawal(wid, "returned", timeout_s=90)
    assert len(system.deals(done["give_back"]["comment"])) == 1
    assert _payouts(system, wid) == 1
    assert system.mt5 is not None
    assert system.mt5.control.account(login)["balance"] == "500.00"


@pytest.mark.parametrize("failpoint", ["payment_state.payout_after_claim", "payment_state.payout_after_call"])
def test_payout_worker_killed_after_the_claim_or_the_psp_call_pays_once(
    system: System, failpoint: str
) -> None:
    """payment-state's worker SIGKILLs itself right after claiming the payout, or right after the PSP
    made it (before the answer is recorded): the claim expires into UNKNOWN, a lookup by our
    reference decides; exactly one payout either way."""
    wid, _ = _approved(system)
    system.restart("payment_state-worker", BACKBONE_FAILPOINTS=f"{failpoint}=kill")
    try:
        system.approve_withdrawal(wid)
        wait_until(
            lambda: system.procs["payment_state-worker"].popen.poll() is not None, 60, "the worker to die"
        )
    finally:
        system.restart("payment_state-worker", BACKBONE_FAILPOINTS="")
    done = system.wait_withdrawal(wid, "paid", timeout_s=120)
    assert _payouts(system, wid) == 1 and len(_mt5_deals(system, done)) == 1
