"""The ``Psp`` port's contract, run against the in-memory fake AND the real simulator adapter, so the
fake the executor tests use cannot drift from the real provider."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.stack import Stack
from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.simpsp import SimPsp
from payment_state.application.ports import (
    Absent,
    Applied,
    AuthorizeCall,
    CallResult,
    CancelCall,
    CaptureCall,
    Conflict,
    Found,
    PayoutCall,
    PayoutCallResult,
    Psp,
    RefundCall,
    Refused,
)
from payment_state.domain.facts import IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.payouts import PayoutFact, PspPayoutStatus
from payment_state.testing import PSP_SIM_MIGRATIONS, PspSim

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def sim(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PspSim]:
    db_url = databases.create_database(stack.pg_admin_url, [PSP_SIM_MIGRATIONS], prefix="pssim")
    # payouts settle at once, as the fake's do (the simulator's default: pending for a second)
    process = PspSim(db_url, tmp_path_factory.mktemp("sim"), PSP_SIM_PAYOUT_SETTLE_DELAY_MS="0").start()
    yield process
    process.stop()
    databases.drop_database(stack.pg_admin_url, db_url)


@pytest.fixture(params=["memory", "simpsp"])
def psp(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Psp]:
    if request.param == "memory":
        yield MemoryPsp()
        return
    adapter = SimPsp(request.getfixturevalue("sim").client())
    yield adapter
    adapter.close()


def ids() -> tuple[str, str]:
    n = next(_ids)
    return f"op_ct_{n}_{id(_ids)}", f"pay_ct_{n}_{id(_ids)}"


def authorize(
    psp: Psp, method: str = "pm_card_visa", capture: str = "manual", amount: int = 1_000
) -> CallResult:
    op, payment = ids()
    return psp.execute(AuthorizeCall(op, payment, "m1", amount, "EUR", method, capture))


def intent_of(result: CallResult | object) -> IntentFact:
    assert isinstance(result, Applied | Found), result
    assert isinstance(result.fact, IntentFact)
    return result.fact


def test_authorize_is_idempotent_and_found_by_reference(psp: Psp) -> None:
    """Manual authorization: AUTHORIZED for the full amount, carrying our reference; the same call
    again returns the same intent (no second one); lookups by reference and by id find it."""
    op, payment = ids()
    call = AuthorizeCall(op, payment, "m1", 1_234, "EUR", "pm_card_visa", "manual")
    first = intent_of(psp.execute(call))
    assert (first.status, first.amount_capturable_minor, first.our_reference) == (
        IntentStatus.AUTHORIZED, 1_234, payment,
    )  # fmt: skip  # packed: a few items a line read better than one each
    again = intent_of(psp.execute(call))
    assert again.provider_payment_id == first.provider_payment_id
    assert intent_of(psp.find_payment(payment, None)).provider_payment_id == first.provider_payment_id
    assert intent_of(psp.find_payment(payment, first.provider_payment_id)).status == IntentStatus.AUTHORIZED
    assert isinstance(psp.find_payment("pay_never_created", None), Absent)


def test_automatic_capture_3ds_decline_and_unknown_method(psp: Psp) -> None:
    """Automatic capture answers CAPTURED; 3-D Secure answers REQUIRES_ACTION with a URL; a declined
    card and an unknown payment method are definite refusals with codes."""
    captured = intent_of(authorize(psp, capture="automatic"))
    assert (captured.status, captured.amount_received_minor) == (IntentStatus.CAPTURED, 1_000)
    challenged = intent_of(authorize(psp, method="pm_card_3ds_required"))
    assert challenged.status == IntentStatus.REQUIRES_ACTION and challenged.next_action_url
    declined = authorize(psp, method="pm_card_declined")
    assert isinstance(declined, Refused) and declined.fact.code == "generic_decline"
    assert declined.fact.provider_payment_id is not None
    unknown = authorize(psp, method="pm_card_from_nowhere")
    assert isinstance(unknown, Refused) and unknown.fact.code == "resource_missing"


def test_capture_cancel_and_wrong_states(psp: Psp) -> None:
    """A partial capture captures that amount; capturing again, or cancelling a captured intent, is a
    definite refusal; an authorized intent cancels."""
    intent = intent_of(authorize(psp, amount=1_000))
    op, payment = ids()
    done = intent_of(psp.execute(CaptureCall(op, payment, intent.provider_payment_id, 600)))
    assert (done.status, done.amount_received_minor) == (IntentStatus.CAPTURED, 600)
    op2, _ = ids()
    refused = psp.execute(CaptureCall(op2, payment, intent.provider_payment_id, 100))
    assert isinstance(refused, Refused) and refused.fact.code == "payment_intent_unexpected_state"
    op3, _ = ids()
    assert isinstance(psp.execute(CancelCall(op3, payment, intent.provider_payment_id, None)), Refused)
    other = intent_of(authorize(psp))
    op4, _ = ids()
    canceled = intent_of(psp.execute(CancelCall(op4, payment, other.provider_payment_id, "our own words")))
    assert canceled.status == IntentStatus.CANCELED  # a free-text reason stays ours, never breaks the call


def test_refunds_are_capped_and_found_by_our_operation(psp: Psp) -> None:
    """Refunds up to the captured amount succeed and are found by our operation id; one more than
    what is left is refused."""
    intent = intent_of(authorize(psp, capture="automatic", amount=1_000))
    op1, payment = ids()
    first = psp.execute(RefundCall(op1, payment, intent.provider_payment_id, 700, "EUR", None))
    assert isinstance(first, Applied) and isinstance(first.fact, RefundFact)
    assert (first.fact.status, first.fact.amount_minor, first.fact.our_reference) == (
        RefundStatus.SUCCEEDED,
        700,
        op1,
    )
    op2, _ = ids()
    too_much = psp.execute(RefundCall(op2, payment, intent.provider_payment_id, 301, "EUR", None))
    assert isinstance(too_much, Refused)
    found = psp.find_refund(op1, None)
    assert isinstance(found, Found) and isinstance(found.fact, RefundFact)
    assert found.fact.provider_refund_id == first.fact.provider_refund_id
    assert isinstance(psp.find_refund("op_never_sent", None), Absent)


# -- payouts ----------------------------------------------------------------------------------------


def payout(
    psp: Psp, destination: str = "pm_card_visa", op: str | None = None, wd: str | None = None
) -> tuple[PayoutCall, PayoutCallResult]:
    n = next(_ids)
    call = PayoutCall(op or f"op_po_{n}_{id(_ids)}", wd or f"wd_{n:032x}", "m1", 2_500, "EUR", destination)
    return call, psp.create_payout(call)


def test_payout_paid_replayed_and_found(psp: Psp) -> None:
    """A payout to a test card is paid (with our reference, amount, currency); the same operation id
    replays the same payout; lookups by id and by reference find it; an unknown reference is Absent."""
    call, result = payout(psp)
    assert isinstance(result, Applied) and isinstance(result.fact, PayoutFact)
    fact = result.fact
    assert (fact.status, fact.amount_minor, fact.currency, fact.reference) == (
        PspPayoutStatus.PAID, 2_500, "EUR", call.withdrawal_id)  # fmt: skip  # aligned under its bracket
    assert psp.create_payout(call) == result
    assert psp.find_payout(call.withdrawal_id, fact.provider_payout_id) == Found(fact)
    assert psp.find_payout(call.withdrawal_id, None) == Found(fact)
    assert isinstance(psp.find_payout(f"wd_{'f' * 32}", None), Absent)


def test_payout_to_an_unknown_token_is_refused_and_creates_nothing(psp: Psp) -> None:
    """An unknown destination token is a definite refusal (resource_missing): nothing to find after."""
    call, result = payout(psp, destination="pm_nonexistent")
    assert isinstance(result, Refused) and result.fact.code == "resource_missing"
    assert isinstance(psp.find_payout(call.withdrawal_id, None), Absent)


def test_two_payouts_under_one_reference_are_a_conflict(psp: Psp) -> None:
    """Two operation ids with one reference make two payouts: the lookup by reference is a Conflict."""
    call, _ = payout(psp)
    payout(psp, wd=call.withdrawal_id)
    assert isinstance(psp.find_payout(call.withdrawal_id, None), Conflict)
