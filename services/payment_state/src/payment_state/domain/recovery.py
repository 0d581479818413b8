"""What the operation executor does next with an open operation, and when.

Pure. The rules that keep a money movement from ever happening twice:
- an operation is *called* at most once on purpose; it is sent again only with the same operation
  id (the provider idempotency key), only while the provider still remembers that key, and only
  after a lookup proved the provider has no outcome for it (``Absent`` or "not done");
- a worker that died mid-call leaves ``call_in_flight``: the outcome is UNKNOWN and is looked up,
  never assumed;
- an UNKNOWN operation is resolved by a lookup or a webhook; lookups back off exponentially up to a
  cap; after ``attempts_before_case`` unanswered lookups, or once the provider's idempotency window
  has passed without proof, a person gets a case (lookups continue: a late answer still applies);
- never a new operation, never another provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from backbone.invariants import invariant

from payment_state.domain.facts import IntentFact, IntentStatus
from payment_state.domain.model import Operation, OperationStatus, OperationType


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    backoff_initial_ms: int
    backoff_max_ms: int
    attempts_before_case: int
    idempotency_window_ms: int  # how long the provider remembers a key (minus a margin); 0: never resend
    recheck_interval_ms: int  # for outcomes that wait on someone else (3-D Secure, a pending refund)

    def __post_init__(self) -> None:
        invariant(0 < self.backoff_initial_ms <= self.backoff_max_ms, "backoff bounds")
        invariant(self.attempts_before_case >= 1, "attempts_before_case >= 1")
        invariant(self.idempotency_window_ms >= 0, "idempotency window >= 0 (0: never send again)")
        invariant(self.recheck_interval_ms > 0, "positive recheck interval")


class OpenOperation(Protocol):
    """What the recovery rules read of an operation: a payment's (``model.Operation``) or a
    payout's (``payouts.PayoutOperation``); both go through the same rules."""

    @property
    def status(self) -> OperationStatus: ...
    @property
    def attempts(self) -> int: ...
    @property
    def call_in_flight(self) -> bool: ...
    @property
    def created_at_ms(self) -> int: ...
    @property
    def is_terminal(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Call:
    """Send the operation to the provider (first time, or again with the same key)."""


@dataclass(frozen=True, slots=True)
class Lookup:
    lost_call: bool = False  # a worker died mid-call: mark UNKNOWN first


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str


Step = Call | Lookup | Skip


def plan(op: OpenOperation) -> Step:
    """The next step for a claimed operation."""
    if op.is_terminal:
        return Skip(f"already {op.status}")
    if op.call_in_flight:
        return Lookup(lost_call=True)
    if op.status == OperationStatus.UNKNOWN or op.attempts > 0:
        # PENDING after an earlier answer means the provider had no final outcome yet
        # (3-D Secure, processing, a pending refund): ask again.
        return Lookup()
    return Call()


def backoff_ms(attempts: int, policy: RecoveryPolicy) -> int:
    """Delay before the next lookup after ``attempts`` calls and lookups (capped exponential)."""
    exponent = min(max(attempts - 1, 0), 30)
    return min(policy.backoff_initial_ms << exponent, policy.backoff_max_ms)


def may_resend(op: OpenOperation, now_ms: int, policy: RecoveryPolicy) -> bool:
    """Sending again is safe only while the provider still deduplicates on the operation id."""
    return now_ms - op.created_at_ms < policy.idempotency_window_ms


def replay_before_lookup(
    op: OpenOperation, *, provider_id_known: bool, provider_replays: bool, now_ms: int, policy: RecoveryPolicy
) -> bool:
    """Stripe's way after a lost answer to a create (ADR 0010): send the SAME request again with the
    same operation id first, once, while the provider still remembers the key: it answers what it
    did (its stored answer) or does it now, for the first time. Only for a create whose provider id
    we never learned (a retrieve by id is exact and cheaper otherwise), only when the answer was
    lost (UNKNOWN after the one call: a pending 3-D Secure is looked up, a replay would repeat the
    stored answer), and only for a provider that replays (``Psp.replays_lost_creates``). After
    that, lookups by our reference, as for every provider."""
    return (
        provider_replays
        and not provider_id_known
        and op.status == OperationStatus.UNKNOWN
        and op.attempts == 1
        and not op.call_in_flight
        and may_resend(op, now_ms, policy)
    )


def intent_shows_not_done(op: Operation, fact: IntentFact) -> bool:
    """The intent proves our capture or cancel did not happen (yet) at the provider."""
    if op.operation_type == OperationType.CAPTURE:
        return fact.status == IntentStatus.AUTHORIZED
    if op.operation_type == OperationType.CANCEL:
        return fact.status in (IntentStatus.AUTHORIZED, IntentStatus.REQUIRES_ACTION)
    return False


@dataclass(frozen=True, slots=True)
class Resend:
    pass


@dataclass(frozen=True, slots=True)
class Reschedule:
    delay_ms: int
    case: str | None = None  # open a case of this kind for a person


AfterLookup = Resend | Reschedule
LookupAnswer = Literal["found_pending", "found_not_done", "absent", "ambiguous", "no_answer"]


def after_lookup(op: OpenOperation, answer: LookupAnswer, now_ms: int, policy: RecoveryPolicy) -> AfterLookup:
    """What to do with an operation a lookup left open (a resolved one needs nothing)."""
    invariant(not op.is_terminal, "only open operations are rescheduled")
    if answer in ("absent", "found_not_done"):
        if may_resend(op, now_ms, policy):
            return Resend()
        return Reschedule(policy.backoff_max_ms, case="idempotency_window_expired")
    if answer == "found_pending":
        return Reschedule(policy.recheck_interval_ms)
    if answer == "ambiguous":  # several provider objects under our reference: never guess which
        return Reschedule(policy.backoff_max_ms, case="provider_duplicates")
    case = "unknown_unresolved" if op.attempts >= policy.attempts_before_case else None
    return Reschedule(backoff_ms(op.attempts, policy), case=case)


def after_unknown_call(op: OpenOperation, policy: RecoveryPolicy) -> Reschedule:
    """A call without an outcome (timeout, 5xx, lost answer): look it up later."""
    case = "unknown_unresolved" if op.attempts >= policy.attempts_before_case else None
    return Reschedule(backoff_ms(op.attempts, policy), case=case)
