"""The payout apply function (``domain/payouts.py``), pure: every status of ours against every
status the PSP can report, refusals, contradictions, and that any order and repetition of facts
converges and announces each outcome at most once."""

from __future__ import annotations

import itertools

import pytest
from payment_state.domain.model import OperationStatus
from payment_state.domain.payout_requests import CreatePayoutRequest, decide_payout, payout_digest
from payment_state.domain.payouts import (
    PayoutApplied,
    PayoutContradicted,
    PayoutFact,
    PayoutOperation,
    PayoutRefused,
    PayoutState,
    PayoutStatus,
    PayoutUnchanged,
    PspPayoutStatus,
    apply_payout_fact,
)
from payment_state.domain.validation import parse_create_payout

WD = "wd_" + "a" * 32
REQUEST = CreatePayoutRequest(WD, "simpsp", 5_000, "EUR", "pm_card_visa", "pay_1", 1001, 7)


def _new() -> PayoutState:
    return decide_payout(REQUEST, merchant_id="m1", operation_id="op_1", now_ms=1_800_000_000_000)


def _fact(status: PspPayoutStatus, **kw: object) -> PayoutFact:
    failure = "card_declined" if status == PspPayoutStatus.FAILED else None
    fields: dict[str, object] = {"amount_minor": 5_000, "currency": "EUR", "reference": WD,
                                 "failure_code": failure, **kw}  # fmt: skip  # aligned under its bracket
    return PayoutFact("po_1", status, **fields)  # type: ignore[arg-type]


def _apply_all(state: PayoutState, facts: list[PayoutFact | PayoutRefused]) -> tuple[PayoutState, list[str]]:
    events: list[str] = []
    for fact in facts:
        result = apply_payout_fact(state, fact)
        if isinstance(result, PayoutApplied):
            state = result.state
            events += [e.event_type for e in result.events]
    return state, events


def test_paid_answer_pays_and_announces_once() -> None:
    """A paid answer moves PENDING to PAID, the operation to SUCCEEDED, and announces PayoutPaid
    with the withdrawal, operation and PSP ids; the same fact again is a duplicate that announces nothing."""
    result = apply_payout_fact(_new(), _fact(PspPayoutStatus.PAID))
    assert isinstance(result, PayoutApplied)
    assert result.state.payout.status == PayoutStatus.PAID
    assert result.state.operation.status == OperationStatus.SUCCEEDED
    assert [e.event_type for e in result.events] == ["PayoutPaid"]
    body = result.events[0].body
    assert (body["withdrawal_id"], body["operation_id"], body["provider_payout_id"]) == (WD, "op_1", "po_1")
    again = apply_payout_fact(result.state, _fact(PspPayoutStatus.PAID))
    assert again == PayoutUnchanged("duplicate", "already PAID")


def test_pending_answer_submits_without_an_event() -> None:
    """A pending payout is SUBMITTED: the PSP has it (its id is kept), nothing is announced, the
    operation stays open (a recheck or a webhook ends it)."""
    result = apply_payout_fact(_new(), _fact(PspPayoutStatus.PENDING))
    assert isinstance(result, PayoutApplied) and result.events == ()
    assert result.state.payout.status == PayoutStatus.SUBMITTED
    assert result.state.payout.provider_payout_id == "po_1"
    assert result.state.operation.status == OperationStatus.PENDING


def test_unknown_operation_is_resolved_by_a_pending_fact() -> None:
    """An UNKNOWN create that a lookup finds pending is no longer unknown: PENDING, reason cleared."""
    state = _new()
    op = PayoutOperation("op_1", WD, OperationStatus.UNKNOWN, attempts=1, unknown_reason="timeout")
    unknown = PayoutState(state.payout, op)
    result = apply_payout_fact(unknown, _fact(PspPayoutStatus.PENDING))
    assert isinstance(result, PayoutApplied)
    assert (result.state.operation.status, result.state.operation.unknown_reason) == (
        OperationStatus.PENDING,
        None,
    )


def test_definite_refusal_fails_with_proof_and_once() -> None:
    """A definite refusal of the create fails the payout (PayoutFailed without a PSP id); a second
    refusal changes nothing."""
    result = apply_payout_fact(_new(), PayoutRefused("op_1", "invalid_destination", "no such token"))
    assert isinstance(result, PayoutApplied)
    assert [e.event_type for e in result.events] == ["PayoutFailed"]
    body = result.events[0].body
    assert (body["provider_payout_id"], body["failure_code"], body["failure_message"]) == (
        None, "invalid_destination", "no such token")  # fmt: skip  # continuation aligned under its bracket
    assert result.state.operation.status == OperationStatus.FAILED
    assert isinstance(apply_payout_fact(result.state, PayoutRefused("op_1", "x")), PayoutUnchanged)


def test_failed_after_pending_fails_once() -> None:
    """pending then failed: PayoutFailed once with the PSP's code; a failed fact again is a duplicate."""
    state, events = _apply_all(_new(), [_fact(PspPayoutStatus.PENDING), _fact(PspPayoutStatus.FAILED),
                                        _fact(PspPayoutStatus.FAILED)])  # fmt: skip  # aligned
    assert state.payout.status == PayoutStatus.FAILED and events == ["PayoutFailed"]
    assert state.payout.failure_code == "card_declined"


def test_returned_after_paid_announces_the_return_once() -> None:
    """paid then returned: PayoutReturned once (with the bank's code); the paid fact arriving late
    after the return is stale and changes nothing."""
    state, events = _apply_all(_new(), [
        _fact(PspPayoutStatus.PAID), _fact(PspPayoutStatus.RETURNED, failure_code="account_closed"),
        _fact(PspPayoutStatus.RETURNED), _fact(PspPayoutStatus.PAID)])  # fmt: skip  # aligned
    assert state.payout.status == PayoutStatus.RETURNED
    assert events == ["PayoutPaid", "PayoutReturned"]
    assert apply_payout_fact(state, _fact(PspPayoutStatus.PAID)) == PayoutUnchanged(
        "stale", "PSP paid after we hold RETURNED"
    )


def test_a_return_we_learn_of_first_announces_both_legs() -> None:
    """The paid webhook lost, the return comes first: PayoutPaid and PayoutReturned, in that order
    (the books need the payment out and its return)."""
    result = apply_payout_fact(_new(), _fact(PspPayoutStatus.RETURNED))
    assert isinstance(result, PayoutApplied)
    assert [e.event_type for e in result.events] == ["PayoutPaid", "PayoutReturned"]


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (PspPayoutStatus.FAILED, PspPayoutStatus.PAID),
        (PspPayoutStatus.FAILED, PspPayoutStatus.RETURNED),
        (PspPayoutStatus.PAID, PspPayoutStatus.FAILED),
    ],
)
def test_contradictions_change_nothing(first: PspPayoutStatus, then: PspPayoutStatus) -> None:
    """paid after failed (or failed after paid) is a contradiction: nothing changes (a person looks)."""
    state, _ = _apply_all(_new(), [_fact(first)])
    assert isinstance(apply_payout_fact(state, _fact(then)), PayoutContradicted)


def test_a_fact_about_another_amount_or_payout_is_a_contradiction() -> None:
    """Another amount, currency, reference or (once known) another PSP payout id: nothing changes."""
    state = _new()
    assert isinstance(
        apply_payout_fact(state, _fact(PspPayoutStatus.PAID, amount_minor=1)), PayoutContradicted
    )
    assert isinstance(
        apply_payout_fact(state, _fact(PspPayoutStatus.PAID, reference="wd_x")), PayoutContradicted
    )
    submitted, _ = _apply_all(state, [_fact(PspPayoutStatus.PENDING)])
    other = PayoutFact("po_2", PspPayoutStatus.PAID, 5_000, "EUR", WD)
    assert isinstance(apply_payout_fact(submitted, other), PayoutContradicted)


def test_a_refusal_after_the_psp_has_the_payout_is_a_contradiction() -> None:
    """A refusal can never fail a payout the PSP already has (SUBMITTED): that needs a person."""
    submitted, _ = _apply_all(_new(), [_fact(PspPayoutStatus.PENDING)])
    assert isinstance(apply_payout_fact(submitted, PayoutRefused("op_1", "x")), PayoutContradicted)


def test_any_order_and_repetition_converges_and_announces_each_outcome_once() -> None:
    """Every ordering (with repeats) of pending, paid and returned ends RETURNED with PayoutPaid and
    PayoutReturned once each: webhooks before answers, lookups after webhooks, redeliveries."""
    facts = [_fact(PspPayoutStatus.PENDING), _fact(PspPayoutStatus.PAID), _fact(PspPayoutStatus.RETURNED)]
    for order in itertools.permutations(facts * 2):
        state, events = _apply_all(_new(), list(order))
        assert state.payout.status == PayoutStatus.RETURNED
        assert sorted(events) == ["PayoutPaid", "PayoutReturned"]


def _body(**over: object) -> dict[str, object]:
    body: dict[str, object] = {
        "withdrawal_id": WD, "provider": "simpsp", "amount_minor": 5_000, "currency": "EUR",
        "destination_token": "pm_card_visa", "source_payment_id": "pay_1", "mt5_login": 1001,
        "mt5_debit_id": 7,
    }  # fmt: skip  # packed: a few items a line read better than one each
    return {**body, **over}


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"amount_minor": 0}, "invalid_amount"),
        ({"amount_minor": -5}, "invalid_amount"),
        ({"currency": "eur"}, "invalid_currency"),
        ({"currency": "XXQ"}, "invalid_currency"),
        ({"destination_token": "4242424242424242"}, "card_data_forbidden"),
        ({"destination_token": "4242 4242 4242 4242"}, "card_data_forbidden"),
        ({"destination_token": "123456"}, "invalid_destination_token"),
        ({"withdrawal_id": "wd_other"}, "invalid_withdrawal_id"),
        ({"mt5_login": 0}, "invalid_mt5_login"),
        ({"extra": 1}, "unknown_field"),
    ],
)
def test_bad_commands_are_refused_with_a_reason(over: dict[str, object], code: str) -> None:
    """A non-positive amount, a bad currency, a card-number-looking destination, a body whose
    withdrawal id is not the key: refused with its own code (the handler then changes nothing)."""
    refused = parse_create_payout(WD, _body(**over))
    assert not isinstance(refused, CreatePayoutRequest) and refused.code == code


def test_the_digest_binds_every_field_and_the_merchant() -> None:
    """The same withdrawal id with any field changed, or another merchant, is another request."""
    parsed = parse_create_payout(WD, _body())
    assert parsed == REQUEST
    digest = payout_digest("m1", REQUEST)
    assert payout_digest("m2", REQUEST) != digest
    changed = parse_create_payout(WD, _body(amount_minor=5_001))
    assert isinstance(changed, CreatePayoutRequest) and payout_digest("m1", changed) != digest
