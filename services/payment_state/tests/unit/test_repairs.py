"""payment-state's repairs (``apply_provider_fact``) on the in-memory store and PSP: the pure rules
(what is refused from the command alone, which lookup confirms a row, what the PSP's answer
contradicts, the bound on unanswered lookups) and the application (receipt once per repair id,
execution through the one apply function, one outcome per repair, a crash between the lookup and
the commit). The same cases run on PostgreSQL and the real simulator in
tests/integration/test_repairs.py; the store rules in tests/integration/test_store_contract.py.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.application.context import Context
from payment_state.application.handlers import handle
from payment_state.application.operation_calls import build_call
from payment_state.application.ports import Applied, Lookup, NoAnswer
from payment_state.application.provider_facts import apply_provider_fact
from payment_state.application.repairs import RepairConfig, RepairExecutor, receive_repair
from payment_state.domain.commands import CreatePaymentRequest, RefundRequest
from payment_state.domain.facts import IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.model import CaptureMethod, OperationStatus, OperationType, PaymentStatus
from payment_state.domain.repairs import (
    LookAgain,
    LookUpPayment,
    LookUpRefund,
    RepairOutcome,
    RepairPolicy,
    after_no_answer,
    mismatch,
    parse_row,
    plan,
    refusal_at_receipt,
    request_of,
)
from payment_state.testing import repair_body, repair_event, settlement_row

LEASE_MS = 30_000
EV_A, EV_B, EV_C = (str(uuid.uuid4()) for _ in range(3))
POLICY = RepairPolicy(attempts_max=3, backoff_initial_ms=100, backoff_max_ms=250)
_keys = itertools.count(1)


# -- the pure rules --------------------------------------------------------------------------------


def _request(row: dict[str, Any], **overrides: Any) -> Any:
    body = repair_body(row, **overrides)
    request = request_of(str(row["reference"]), "ev-1", body)
    assert request is not None
    return request


def test_a_command_for_another_service_or_without_a_target_is_not_ours() -> None:
    """Only target 'payment_state' is payment-state's; the ledger's and v1 commands are ignored."""
    row = settlement_row("pay_1", "pi_1", 10_000)
    assert request_of("pay_1", "e", repair_body(row, target="ledger")) is None
    assert request_of("pay_1", "e", repair_body(row, target="")) is None
    assert request_of("pay_1", "e", repair_body(row)) is not None


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"repair_type": "post_journal"}, "does not execute post_journal"),
        ({"approved_by": "alice"}, "same person"),
        ({"requested_by": "", "approved_by": ""}, "same person"),
        ({"fact_type": "PaymentCaptured"}, "needs a SettlementRow"),
        ({"fact_type": None, "fact_json": None}, "needs a SettlementRow"),
        ({"fact_json": "{not json"}, "malformed: not JSON"),
        ({"fact_json": "[1]"}, "malformed: not a JSON object"),
        ({"amount_minor": 9_999}, "the command moves 9999 EUR, its row 10000 EUR"),
        ({"currency": "USD"}, "the command moves 10000 USD"),
    ],
)
def test_the_command_alone_is_refused_when_it_cannot_be_executed(overrides: dict[str, Any], why: str) -> None:
    """A type payment-state does not execute, a maker approving their own repair (never trusted to
    the sender), no settlement row or an unreadable one, a command moving another amount or
    currency than its row: each is refused at receipt, with the reason."""
    refusal = refusal_at_receipt(_request(settlement_row("pay_1", "pi_1", 10_000), **overrides))
    assert refusal is not None and refusal.outcome == "refused" and why in refusal.detail


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"gross_minor": "10000"}, "gross_minor is not an integer"),
        ({"gross_minor": True}, "gross_minor is not an integer"),
        ({"gross_minor": 10.5}, "gross_minor is not an integer"),
        ({"gross_minor": 0}, "gross_minor is zero"),
        ({"currency": "eur"}, "currency is not an ISO 4217 code"),
        ({"payment_intent_id": ""}, "payment_intent_id missing"),
        ({"source_reference": 7}, "source_reference is not text"),
    ],
)
def test_a_malformed_settlement_row_is_named(change: dict[str, Any], why: str) -> None:
    """The row is parsed strictly: integer minor units (never a float or a bool), an ISO code, the
    ids present; what is wrong is said."""
    row = {**settlement_row("pay_1", "pi_1", 10_000), **change}
    parsed = parse_row(json.dumps(row))
    assert isinstance(parsed, str) and why in parsed


def test_a_dispute_row_or_a_row_of_another_payment_is_refused() -> None:
    """A dispute cannot be confirmed at the PSP (no lookup for it) and is left to a person; a row
    about another payment than the command's key is refused."""
    dispute = settlement_row("pay_1", "pi_1", -4_000, row_type="dispute", source_id="dp_1")
    refusal = refusal_at_receipt(_request(dispute))
    assert refusal is not None and "does not repair dispute rows" in refusal.detail
    other = settlement_row("pay_2", "pi_1", 10_000)
    refusal = refusal_at_receipt(replace(_request(other), payment_id="pay_1"))
    assert refusal is not None and "about payment pay_2, the command about pay_1" in refusal.detail
    assert refusal_at_receipt(_request(settlement_row("pay_1", "pi_1", 10_000))) is None


def test_the_plan_looks_up_the_object_the_row_names_or_refuses() -> None:
    """No such payment of ours, another payment intent than ours, another currency or a refund we
    never asked for: refused. A charge is looked up by our provider id (or our reference); a
    refund by our refund operation and its provider id."""
    store, _, _ = _world()
    pid = _create(store)
    state = _state(store, pid)
    charge = _row_of(settlement_row(pid, "pi_1", 10_000))
    assert plan(charge, None) == RepairOutcome(
        "refused", f"no payment {pid} here: the row is not about a payment of ours"
    )
    assert plan(charge, state) == LookUpPayment(pid, None)
    known = replace(state, payment=replace(state.payment, provider_payment_id="pi_9"))
    refusal = plan(charge, known)
    assert isinstance(refusal, RepairOutcome) and "pi_1 is not ours (pi_9)" in refusal.detail
    refusal = plan(_row_of(settlement_row(pid, "pi_1", 10_000, currency="USD")), state)
    assert isinstance(refusal, RepairOutcome) and "in USD" in refusal.detail
    stranger = _row_of(settlement_row(pid, "pi_1", -500, row_type="refund", source_id="re_1"))
    refusal = plan(stranger, state)
    assert isinstance(refusal, RepairOutcome) and "not a refund payment-state asked for" in refusal.detail
    authorize = state.operations[0].operation_id
    not_a_refund = _row_of(settlement_row(pid, "pi_1", -5, row_type="refund", source_reference=authorize))
    assert isinstance(plan(not_a_refund, state), RepairOutcome)


def test_a_refund_row_is_looked_up_by_our_refund_operation() -> None:
    """A refund row names our refund operation (its source reference): that refund is looked up,
    among the refunds of the payment's intent (how Stripe finds a refund by our reference)."""
    store, psp, _ = _world()
    pid, _ = _captured_unannounced(store, psp, announce=True)
    refund_op = _refund(store, pid, 3_000)
    row = _row_of(
        settlement_row(pid, "pi_1", -3_000, row_type="refund", source_id="re_9", source_reference=refund_op)
    )
    assert plan(row, _state(store, pid)) == LookUpRefund(refund_op, None, "pi_1")


def test_what_the_psp_answers_must_be_what_the_row_says() -> None:
    """The PSP's object confirms the row only with the same id, status, amount and currency (and
    our reference): anything else is named, both sides, and nothing is applied."""
    row = _row_of(settlement_row("pay_1", "pi_1", 10_000))
    captured = IntentFact("pi_1", IntentStatus.CAPTURED, 10_000, "EUR", amount_received_minor=10_000,
                          our_reference="pay_1")  # fmt: skip  # continuation aligned under its bracket
    assert mismatch(row, captured) is None
    cases = {
        "captured 9000 EUR": replace(captured, amount_received_minor=9_000),
        "pi_1 authorized": replace(captured, status=IntentStatus.AUTHORIZED),
        "payment intent pi_2": replace(captured, provider_payment_id="pi_2"),
        "is pay_other's": replace(captured, our_reference="pay_other"),
        "captured 10000 USD": replace(captured, currency="USD"),
    }
    for expected, fact in cases.items():
        problem = mismatch(row, fact)
        assert problem is not None and expected in problem, (expected, problem)
    refund_row = _row_of(settlement_row("pay_1", "pi_1", -500, row_type="refund", source_id="re_1",
                                        source_reference="op_r"))  # fmt: skip  # aligned under its bracket
    refund = RefundFact("re_1", "pi_1", RefundStatus.SUCCEEDED, 500, "EUR", our_reference="op_r")
    assert mismatch(refund_row, refund) is None
    pending = mismatch(refund_row, replace(refund, status=RefundStatus.PENDING))
    assert pending is not None and "refund re_1 pending of 500 EUR" in pending
    assert mismatch(refund_row, captured) == "the PSP answered a payment intent for a refund row"
    assert mismatch(row, refund) == "the PSP answered a refund for a charge row"


def test_unanswered_lookups_back_off_then_end_unknown_at_the_bound() -> None:
    """No answer: look again after a capped exponential backoff; after ``attempts_max`` lookups the
    repair is unknown, saying how many lookups went unanswered and the last reason."""
    assert after_no_answer(1, "timeout", POLICY) == LookAgain(100)
    assert after_no_answer(2, "timeout", POLICY) == LookAgain(200)
    final = after_no_answer(3, "http_503", POLICY)
    assert isinstance(final, RepairOutcome) and final.outcome == "unknown"
    assert "no answer to 3 lookups (last: http_503)" in final.detail


# -- the application on the in-memory store and PSP -----------------------------------------------


class FlakyPsp(MemoryPsp):
    """The in-memory PSP, counting lookups; ``silent`` lookups go unanswered first."""

    lookups: int = 0
    silent: int = 0

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup:
        self.lookups += 1
        if self.silent > 0:
            self.silent -= 1
            return NoAnswer("timeout")
        return super().find_payment(payment_id, provider_payment_id)


def _ctx(store: InMemoryPaymentStore) -> Context:
    return Context("simpsp", now_ms=store.now_ms)


def _world(worker: str = "w1") -> tuple[InMemoryPaymentStore, FlakyPsp, RepairExecutor]:
    store, psp = InMemoryPaymentStore(), FlakyPsp()
    return store, psp, _executor(store, psp, worker)


def _executor(store: InMemoryPaymentStore, psp: MemoryPsp, worker: str = "w1") -> RepairExecutor:
    config = RepairConfig(worker_id=worker, batch_size_max=10, lease_ms=LEASE_MS, policy=POLICY)
    return RepairExecutor(store.transaction, psp, _ctx(store), config)


def _create(store: InMemoryPaymentStore, method: CaptureMethod = CaptureMethod.AUTOMATIC) -> str:
    request = CreatePaymentRequest(10_000, "EUR", "pm_card_visa", method, "dep_1")
    with store.transaction() as s:
        reply = handle(s, _ctx(store), "m1", f"create-{next(_keys)}", request)
    assert reply.status == 201
    return str(reply.body["payment"]["payment_id"])


def _state(store: InMemoryPaymentStore, payment_id: str) -> Any:
    with store.transaction() as s:
        return s.load_state(payment_id)


def _captured_unannounced(
    store: InMemoryPaymentStore, psp: MemoryPsp, announce: bool = False
) -> tuple[str, IntentFact]:
    """A payment the PSP authorized and captured (automatic capture) whose answer was lost and whose
    webhook never came: payment-state still holds it CREATED. ``announce``: it did learn."""
    pid = _create(store)
    state = _state(store, pid)
    result = psp.execute(build_call(state, state.operations[0]))
    intent = psp.intents[f"pi_{len(psp.intents)}"]
    assert intent.status == IntentStatus.CAPTURED and intent.our_reference == pid
    assert isinstance(result, Applied)
    if announce:
        with store.transaction() as s:
            apply_provider_fact(s, _ctx(store), result.fact, source="response", payment_id=pid)
    return pid, intent


def _refund(store: InMemoryPaymentStore, payment_id: str, amount_minor: int) -> str:
    with store.transaction() as s:
        reply = handle(s, _ctx(store), "m1", f"refund-{next(_keys)}",
                       RefundRequest(payment_id, amount_minor, "EUR", None))  # fmt: skip  # aligned
    assert reply.status == 202, reply
    return str(reply.body["operation"]["operation_id"])


def _row_of(row: dict[str, Any]) -> Any:
    parsed = parse_row(json.dumps(row))
    assert not isinstance(parsed, str)
    return parsed


def _send(
    store: InMemoryPaymentStore, payment_id: str, body: dict[str, Any], event_id: str | None = None
) -> None:
    with store.transaction() as s:
        receive_repair(s, repair_event(payment_id, body, event_id))


def _outcomes(store: InMemoryPaymentStore) -> list[dict[str, Any]]:
    return [body for _, kind, body in store.events if kind == "RepairOutcome"]


def _types(store: InMemoryPaymentStore, payment_id: str) -> list[str]:
    return [kind for key, kind, _ in store.events if key == payment_id and kind != "RepairOutcome"]


def test_a_lost_capture_is_applied_from_the_psp_answer_with_one_outcome() -> None:
    """The row is confirmed at the PSP and what the PSP answered goes through the apply function as
    a lookup: PaymentAuthorized and PaymentCaptured once, the authorize operation succeeded, and
    one RepairOutcome executed (by payment_state, the command's digest, the capture's reference)."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    body = repair_body(settlement_row(pid, intent.provider_payment_id, 10_000, fee_minor=320))
    _send(store, pid, body)
    assert executor.run_once() == 1
    state = _state(store, pid)
    assert (
        state.payment.status == PaymentStatus.CAPTURED
        and state.payment.provider_payment_id == intent.provider_payment_id
    )
    assert state.operations[0].status == OperationStatus.SUCCEEDED
    assert _types(store, pid) == ["PaymentAuthorized", "PaymentCaptured"]
    (outcome,) = _outcomes(store)
    assert (outcome["outcome"], outcome["executed_by"], outcome["command_digest"], outcome["repair_id"]) == (
        "executed", "payment_state", body["command_digest"], body["repair_id"],
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert outcome["reference"] == f"capture:{state.operations[0].operation_id}"
    assert "applied as a lookup: PaymentAuthorized,PaymentCaptured" in outcome["detail"]
    assert [f.source for f in store.facts] == ["lookup"]
    assert executor.run_once() == 0 and psp.lookups == 1


def test_the_same_repair_twice_executes_once() -> None:
    """The same command redelivered (same event id) and delivered again under another event id
    (same repair id) is recorded once, looked up once, applied once, answered once."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    body = repair_body(settlement_row(pid, intent.provider_payment_id, 10_000))
    _send(store, pid, body, EV_A)
    _send(store, pid, body, EV_A)
    _send(store, pid, body, EV_B)
    executor.run_once()
    _send(store, pid, body, EV_C)  # after it was executed
    executor.run_once()
    assert [o["outcome"] for o in _outcomes(store)] == ["executed"]
    assert _types(store, pid).count("PaymentCaptured") == 1 and psp.lookups == 1


def test_a_fact_already_in_our_state_is_executed_without_a_second_event() -> None:
    """The webhook was late, not lost: the state already has it; the repair confirms it at the PSP,
    applies nothing, and says so (executed, already in our state)."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp, announce=True)
    before = _types(store, pid)
    _send(store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_000)))
    executor.run_once()
    (outcome,) = _outcomes(store)
    assert outcome["outcome"] == "executed" and "already in our state" in outcome["detail"]
    assert _types(store, pid) == before == ["PaymentAuthorized", "PaymentCaptured"]


def test_a_row_the_psp_contradicts_is_refused_and_nothing_applied() -> None:
    """The report says 10,100 captured, the PSP 10,000: refused naming both; the payment stays as it
    was and no payment event is written."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    _send(store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_100)))
    executor.run_once()
    (outcome,) = _outcomes(store)
    assert outcome["outcome"] == "refused"
    assert (
        "captured 10000 EUR; the row says" in outcome["detail"] and "captured 10100 EUR" in outcome["detail"]
    )
    assert _state(store, pid).payment.status == PaymentStatus.CREATED and _types(store, pid) == []


def test_an_unknown_payment_and_an_absent_object_are_refused() -> None:
    """A row about no payment of ours is refused without a PSP call; a payment the PSP never heard of
    is refused as not confirmed."""
    store, psp, executor = _world()
    _send(store, "pay_nobody", repair_body(settlement_row("pay_nobody", "pi_x", 500)))
    pid = _create(store)  # never sent to the PSP
    _send(store, pid, repair_body(settlement_row(pid, "pi_y", 10_000)))
    executor.run_once()
    first, second = _outcomes(store)
    assert first["outcome"] == "refused" and "no payment pay_nobody here" in first["detail"]
    assert second["outcome"] == "refused" and "the PSP has no such payment intent" in second["detail"]
    assert psp.lookups == 1


def test_maker_equal_to_checker_is_refused_at_receipt_without_a_lookup() -> None:
    """A repair its maker approved is refused when it arrives: no PSP lookup, nothing applied."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    _send(
        store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_000), approved_by="alice")
    )
    assert executor.run_once() == 0
    (outcome,) = _outcomes(store)
    assert outcome["outcome"] == "refused" and "same person" in outcome["detail"]
    assert psp.lookups == 0 and _types(store, pid) == []


def test_an_unanswering_psp_is_looked_up_again_then_the_repair_is_unknown() -> None:
    """Each unanswered lookup reschedules the repair after its backoff; after the bound (3) it is
    unknown, once, with the count and the reason, and nothing was applied."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    psp.silent = 10
    _send(store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_000)))
    assert executor.run_once() == 1 and _outcomes(store) == []
    assert executor.run_once() == 0  # not due before its backoff
    for _ in range(3):
        store.advance(1_000)
        executor.run_once()
    (outcome,) = _outcomes(store)
    assert outcome["outcome"] == "unknown" and "no answer to 3 lookups (last: timeout)" in outcome["detail"]
    assert psp.lookups == 3 and _types(store, pid) == []


def test_a_psp_that_answers_after_a_silence_executes_the_repair() -> None:
    """One unanswered lookup, then an answer: the repair is executed on the second lookup."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp)
    psp.silent = 1
    _send(store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_000)))
    executor.run_once()
    store.advance(1_000)
    executor.run_once()
    assert [o["outcome"] for o in _outcomes(store)] == ["executed"] and psp.lookups == 2


def test_a_crash_between_the_lookup_and_the_commit_looks_up_again_and_applies_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker dies after its lookup, before its transaction commits: nothing of it stays; once
    the lease expires another worker looks up again and applies once, one outcome."""
    store, psp, executor = _world("w1")
    pid, intent = _captured_unannounced(store, psp)
    _send(store, pid, repair_body(settlement_row(pid, intent.provider_payment_id, 10_000)))

    def crash(_: object, *args: object, **kwargs: object) -> bool:
        raise RuntimeError("worker died")

    with monkeypatch.context() as m:
        m.setattr(InMemoryPaymentStore, "finish_repair", crash)
        executor.run_once()  # logged; the transaction rolled back
    assert _types(store, pid) == [] and _outcomes(store) == [] and psp.lookups == 1
    other = _executor(store, psp, "w2")
    assert other.run_once() == 0  # w1's lease still runs
    store.advance(LEASE_MS + 1)
    assert other.run_once() == 1
    assert executor.run_once() == 0  # w1 lost it
    assert [o["outcome"] for o in _outcomes(store)] == ["executed"] and psp.lookups == 2
    assert _types(store, pid) == ["PaymentAuthorized", "PaymentCaptured"]


def test_a_lost_refund_is_applied_from_the_psp_answer() -> None:
    """A refund we asked for whose answer and webhook were lost: the PSP's refund confirms the row,
    RefundSucceeded once, the refund operation succeeded, executed with the refund's reference."""
    store, psp, executor = _world()
    pid, intent = _captured_unannounced(store, psp, announce=True)
    refund_op = _refund(store, pid, 3_000)
    state = _state(store, pid)
    op = state.operation(refund_op)
    assert op is not None and op.operation_type == OperationType.REFUND
    psp.execute(build_call(state, op))  # the answer is lost
    refund = next(iter(psp.refunds.values()))
    row = settlement_row(
        pid,
        intent.provider_payment_id,
        -3_000,
        row_type="refund",
        source_id=refund.provider_refund_id,
        source_reference=refund_op,
    )
    _send(store, pid, repair_body(row))
    executor.run_once()
    (outcome,) = _outcomes(store)
    assert outcome["outcome"] == "executed" and outcome["reference"] == f"refund:{op.refund_id}"
    assert _types(store, pid) == ["PaymentAuthorized", "PaymentCaptured", "RefundSucceeded"]
    refunded = _state(store, pid)
    assert (
        refunded.payment.refunded_minor == 3_000
        and refunded.payment.status == PaymentStatus.PARTIALLY_REFUNDED
    )
