"""The executor's rules: call once, look up unknowns, resend only with the same key and only within
the provider's idempotency window, cases for a person after the limit."""

from __future__ import annotations

from dataclasses import replace

from payment_state.domain.facts import IntentFact, IntentStatus
from payment_state.domain.model import Operation, OperationStatus, OperationType
from payment_state.domain.recovery import (
    Call,
    Lookup,
    RecoveryPolicy,
    Reschedule,
    Resend,
    Skip,
    after_lookup,
    after_unknown_call,
    backoff_ms,
    intent_shows_not_done,
    plan,
)

POLICY = RecoveryPolicy(
    backoff_initial_ms=100,
    backoff_max_ms=1_000,
    attempts_before_case=5,
    idempotency_window_ms=60_000,
    recheck_interval_ms=500,
)
OP = Operation("op_1", "pay_1", OperationType.CAPTURE, 100, "EUR", "simpsp", created_at_ms=1_000)


def test_plan() -> None:
    """Never called: call. Called and answered without a final outcome, or UNKNOWN: look up. A call
    marker left by a dead worker: look up as lost. Resolved: skip."""
    assert plan(OP) == Call()
    assert plan(replace(OP, attempts=1)) == Lookup()
    assert plan(replace(OP, status=OperationStatus.UNKNOWN, attempts=1)) == Lookup()
    assert plan(replace(OP, call_in_flight=True, attempts=1)) == Lookup(lost_call=True)
    assert isinstance(plan(replace(OP, status=OperationStatus.SUCCEEDED)), Skip)


def test_backoff_doubles_up_to_the_cap() -> None:
    """Lookups back off exponentially and never wait longer than the cap."""
    assert [backoff_ms(n, POLICY) for n in range(1, 7)] == [100, 200, 400, 800, 1_000, 1_000]
    assert backoff_ms(10_000, POLICY) == 1_000


def test_absent_is_resent_with_the_same_key_only_within_the_window() -> None:
    """The provider has no trace of the call: sending the same call again is safe while it still
    remembers the key; after that, a person decides (never a blind resend)."""
    unknown = replace(OP, status=OperationStatus.UNKNOWN, attempts=2)
    assert after_lookup(unknown, "absent", 30_000, POLICY) == Resend()
    late = after_lookup(unknown, "absent", 61_001, POLICY)
    assert late == Reschedule(1_000, case="idempotency_window_expired")
    assert after_lookup(unknown, "found_not_done", 61_001, POLICY) == late


def test_no_answer_backs_off_then_opens_a_case() -> None:
    """An unanswered lookup backs off; from the limit on, every reschedule asks for a case (the case
    table keeps one per operation and kind)."""
    assert after_lookup(replace(OP, attempts=2), "no_answer", 0, POLICY) == Reschedule(200)
    assert after_lookup(replace(OP, attempts=5), "no_answer", 0, POLICY) == Reschedule(
        1_000, case="unknown_unresolved"
    )
    assert after_unknown_call(replace(OP, attempts=1), POLICY) == Reschedule(100)


def test_waiting_on_someone_is_rechecked_at_the_recheck_interval() -> None:
    """3-D Secure or a pending refund: look again after the recheck interval, no case."""
    assert after_lookup(replace(OP, attempts=9), "found_pending", 0, POLICY) == Reschedule(500)


def test_intent_proves_capture_or_cancel_not_done() -> None:
    """A still-authorized intent proves our capture did not happen; an authorize is never 'not done'
    once the intent exists."""
    authorized = IntentFact("pi_1", IntentStatus.AUTHORIZED, 100, "EUR")
    assert intent_shows_not_done(OP, authorized)
    assert intent_shows_not_done(replace(OP, operation_type=OperationType.CANCEL), authorized)
    assert not intent_shows_not_done(OP, replace(authorized, status=IntentStatus.CAPTURED))
    assert not intent_shows_not_done(replace(OP, operation_type=OperationType.AUTHORIZE), authorized)
