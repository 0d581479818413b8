"""Repairs payment-state executes (``ExecuteRepair`` with target ``payment_state``): the pure part.

An ``apply_provider_fact`` repair says: the PSP's settlement report holds money (a ``SettlementRow``)
that payment-state never learned of (a lost webhook: the reconciler's ``external_only`` case), and
two different people agreed to let payment-state catch up. payment-state never applies the row as
such: the row only names the object (the payment intent for a ``charge``, our refund for a
``refund``); the object is looked up at the PSP through the provider port, the PSP's answer is
compared with the row, and only then applied through the one apply function, exactly as a lookup.

This module decides, the application does:
- ``request_of``: the command, when it is addressed to payment-state (None otherwise);
- ``refusal_at_receipt``: what can be refused from the command alone (a type we do not execute, the
  maker approving their own repair, no row or a malformed one, a row for another payment, a command
  that would move another amount than its row);
- ``plan``: against our state, which lookup confirms the row (or why none can: no such payment of
  ours, a refund we never asked for, another payment intent than ours);
- ``mismatch``: what the PSP's answer contradicts in the row (another amount, currency, status, id);
- ``after_no_answer``: look again after a capped backoff, or ``unknown`` after the bound;
- ``executed``: the outcome of an applied (or already known) fact.
Every outcome is a ``RepairOutcome``: ``executed``, ``refused`` or ``unknown``, with its detail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from backbone.invariants import invariant
from backbone.repairs import command_for
from backbone.repairs import outcome_body as repair_outcome_body

from payment_state.domain.facts import IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.model import OperationStatus, OperationType, PaymentState

TARGET: Final = "payment_state"
EXECUTES: Final = frozenset({"apply_provider_fact"})
FACT_TYPE: Final = "SettlementRow"
# A dispute row cannot be confirmed: the provider port has no dispute lookup (the PSP's API has none).
ROW_TYPES: Final = frozenset({"charge", "refund"})

Outcome = Literal["executed", "refused", "unknown"]


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """An ``ExecuteRepair`` addressed to payment-state, as received (recorded once per repair id)."""

    repair_id: int
    case_id: int
    repair_type: str
    source_key: str
    payment_id: str  # the command's Kafka key
    requested_by: str
    approved_by: str
    amount_minor: int | None
    currency: str | None
    reason: str
    fact_type: str | None
    fact_json: str | None
    command_digest: str
    command_event_id: str


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    outcome: Outcome
    detail: str
    reference: str | None = None

    def __post_init__(self) -> None:
        invariant(self.outcome in ("executed", "refused", "unknown"), f"outcome {self.outcome!r}")
        invariant(bool(self.detail), "an outcome says what happened")


def refused(detail: str) -> RepairOutcome:
    return RepairOutcome("refused", detail)


@dataclass(frozen=True, slots=True)
class SettlementRow:
    """One row of the PSP's settlement report, as the reconciler imported it."""

    source_key: str
    balance_transaction_id: str
    type: str  # charge | refund | dispute
    payment_intent_id: str
    source_id: str  # ch_… | re_… | dp_…
    reference: str  # our payment id
    source_reference: str | None  # our refund reference (the refund operation id), refund rows
    currency: str
    gross_minor: int  # captured (charge) or minus the amount given back (refund, dispute)
    fee_minor: int
    net_minor: int

    @property
    def amount_minor(self) -> int:
        return abs(self.gross_minor)


def outcome_body(request: RepairRequest, outcome: RepairOutcome) -> dict[str, Any]:
    """The ``RepairOutcome`` v1 body (without its envelope)."""
    return repair_outcome_body(
        repair_id=request.repair_id,
        case_id=request.case_id,
        repair_type=request.repair_type,
        command_digest=request.command_digest,
        outcome=outcome.outcome,
        detail=outcome.detail,
        executed_by=TARGET,
        reference=outcome.reference,
    )


# -- receipt --------------------------------------------------------------------------------------


def request_of(payment_id: str, event_id: str, body: Mapping[str, Any]) -> RepairRequest | None:
    """The command, when it is payment-state's (a v1 command carries no target: not ours)."""
    command = command_for(TARGET, payment_id, body)
    if command is None:
        return None
    return RepairRequest(
        repair_id=command.repair_id,
        case_id=command.case_id,
        repair_type=command.repair_type,
        source_key=command.source_key,
        payment_id=payment_id,
        requested_by=command.requested_by,
        approved_by=command.approved_by,
        amount_minor=command.amount_minor,
        currency=command.currency,
        reason=command.reason,
        fact_type=command.fact_type,
        fact_json=command.fact_json,
        command_digest=command.command_digest,
        command_event_id=event_id,
    )


def refusal_at_receipt(request: RepairRequest) -> RepairOutcome | None:
    """Why the command alone is refused, or None when it goes on to the PSP lookup."""
    if request.repair_type not in EXECUTES:
        return refused(f"payment-state does not execute {request.repair_type} repairs")
    if not request.requested_by or request.requested_by == request.approved_by:
        # The reconciler never sends one; payment-state does not trust it to.
        return refused(f"proposed and approved by the same person ({request.requested_by!r})")
    if request.fact_type != FACT_TYPE or request.fact_json is None:
        return refused(f"apply_provider_fact needs a {FACT_TYPE} (fact_type {request.fact_type!r})")
    row = parse_row(request.fact_json)
    if isinstance(row, str):
        return refused(f"the settlement row is malformed: {row}")
    return _row_refusal(request, row)


def _row_refusal(request: RepairRequest, row: SettlementRow) -> RepairOutcome | None:
    if row.type not in ROW_TYPES:
        return refused(
            f"payment-state does not repair {row.type} rows: it cannot confirm one at the PSP"
            " (no lookup for it); a person resolves the case"
        )
    if row.reference != request.payment_id:
        return refused(f"the row is about payment {row.reference}, the command about {request.payment_id}")
    if (request.amount_minor, request.currency) != (row.amount_minor, row.currency):
        return refused(
            f"the command moves {request.amount_minor} {request.currency},"
            f" its row {row.amount_minor} {row.currency}"
        )
    return None


_TEXT: Final = ("source_key", "balance_transaction_id", "type", "payment_intent_id", "source_id", "reference")
_MONEY: Final = ("gross_minor", "fee_minor", "net_minor")


def parse_row(fact_json: str) -> SettlementRow | str:
    """The row, strictly (integer minor units, an ISO-4217 code, the ids present); or what is wrong."""
    try:
        doc = json.loads(fact_json)
    except ValueError:
        return "not JSON"
    problem = "not a JSON object" if not isinstance(doc, dict) else _row_problem(doc)
    if problem is not None:
        return problem
    return SettlementRow(
        source_key=doc["source_key"],
        balance_transaction_id=doc["balance_transaction_id"],
        type=doc["type"],
        payment_intent_id=doc["payment_intent_id"],
        source_id=doc["source_id"],
        reference=doc["reference"],
        source_reference=doc.get("source_reference") or None,
        currency=doc["currency"],
        gross_minor=doc["gross_minor"],
        fee_minor=doc["fee_minor"],
        net_minor=doc["net_minor"],
    )


def _row_problem(doc: dict[str, Any]) -> str | None:
    for name in _TEXT:
        if not isinstance(doc.get(name), str) or not doc[name]:
            return f"{name} missing"
    for name in _MONEY:
        if not isinstance(doc.get(name), int) or isinstance(doc[name], bool):
            return f"{name} is not an integer of minor units"
    currency, source_reference = doc.get("currency"), doc.get("source_reference")
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isascii() and currency.isupper()):
        return "currency is not an ISO 4217 code"
    if source_reference is not None and not isinstance(source_reference, str):
        return "source_reference is not text"
    if doc["gross_minor"] == 0:
        return "gross_minor is zero: no money to repair"
    return None


# -- execution ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookUpPayment:
    payment_id: str
    provider_payment_id: str | None  # ours when we know it, else the lookup goes by our reference


@dataclass(frozen=True, slots=True)
class LookUpRefund:
    operation_id: str  # our refund operation: our reference at the PSP
    provider_refund_id: str | None
    provider_payment_id: str | None = None  # the refunded intent (Stripe lists refunds by it)


Plan = LookUpPayment | LookUpRefund | RepairOutcome


def plan(row: SettlementRow, state: PaymentState | None) -> Plan:
    """The lookup that confirms ``row`` against our records, or the refusal."""
    if state is None:
        return refused(f"no payment {row.reference} here: the row is not about a payment of ours")
    p = state.payment
    if p.provider_payment_id not in (None, row.payment_intent_id):
        return refused(
            f"the row's payment intent {row.payment_intent_id} is not ours ({p.provider_payment_id})"
        )
    if row.currency != p.currency:
        return refused(f"the row is in {row.currency}, payment {p.payment_id} in {p.currency}")
    if row.type == "charge":
        return LookUpPayment(p.payment_id, p.provider_payment_id)
    op = state.operation(row.source_reference) if row.source_reference else None
    if op is None or op.operation_type != OperationType.REFUND:
        return refused(
            f"refund {row.source_id} ({row.source_reference}) is not a refund payment-state asked for:"
            " a person resolves it"
        )
    return LookUpRefund(
        op.operation_id, op.provider_reference, p.provider_payment_id or row.payment_intent_id
    )


def mismatch(row: SettlementRow, fact: IntentFact | RefundFact) -> str | None:
    """What the PSP's object contradicts in the row, or None when it confirms it."""
    match fact:
        case IntentFact():
            if row.type != "charge":
                return f"the PSP answered a payment intent for a {row.type} row"
            if fact.our_reference not in (None, row.reference):
                return f"the PSP's payment intent {fact.provider_payment_id} is {fact.our_reference}'s"
            theirs = (fact.provider_payment_id, str(fact.status), fact.amount_received_minor, fact.currency)
            ours = (row.payment_intent_id, str(IntentStatus.CAPTURED), row.amount_minor, row.currency)
            what = "payment intent {} {} captured {} {}"
        case RefundFact():
            if row.type != "refund":
                return f"the PSP answered a refund for a {row.type} row"
            theirs = (fact.provider_refund_id, str(fact.status), fact.amount_minor, fact.currency)
            ours = (row.source_id, str(RefundStatus.SUCCEEDED), row.amount_minor, row.currency)
            what = "refund {} {} of {} {}"
    if theirs == ours:
        return None
    return f"the PSP says {what.format(*theirs)}; the row says {what.format(*ours)}"


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    attempts_max: int  # lookups before ``unknown``
    backoff_initial_ms: int
    backoff_max_ms: int

    def __post_init__(self) -> None:
        invariant(1 <= self.attempts_max <= 100, "repair lookups in 1..100")
        invariant(0 < self.backoff_initial_ms <= self.backoff_max_ms, "0 < backoff initial <= max")


@dataclass(frozen=True, slots=True)
class LookAgain:
    delay_ms: int


def after_no_answer(attempts: int, reason: str, policy: RepairPolicy) -> LookAgain | RepairOutcome:
    """``attempts`` lookups went unanswered (the last for ``reason``): again later, or unknown."""
    invariant(attempts >= 1, "after a lookup")
    if attempts >= policy.attempts_max:
        return RepairOutcome(
            "unknown",
            f"the PSP gave no answer to {attempts} lookups (last: {reason}); nothing was applied:"
            " a person looks",
        )
    exponent = min(attempts - 1, 30)  # the executor's formula (``recovery.backoff_ms``)
    return LookAgain(min(policy.backoff_initial_ms << exponent, policy.backoff_max_ms))


def executed(
    row: SettlementRow, fact_outcome: str, fact_detail: str | None, state: PaymentState
) -> RepairOutcome:
    """The outcome once the confirmed fact went through the apply function (``fact_outcome`` is what
    it did: applied, duplicate, ...), or refused when our records contradict the PSP."""
    confirms = f"the PSP confirms {row.type} {row.source_id} of {row.amount_minor} {row.currency}"
    reference = _reference(row, state)
    match fact_outcome:
        case "applied":
            return RepairOutcome("executed", f"{confirms}; applied as a lookup: {fact_detail}", reference)
        case "duplicate":
            return RepairOutcome(
                "executed", f"{confirms}; already in our state ({fact_detail}): nothing applied", reference
            )
        case _:  # stale, pending, conflict: our records do not take the confirmed fact
            return refused(f"{confirms}, but our records do not take it ({fact_outcome}: {fact_detail})")


def _reference(row: SettlementRow, state: PaymentState) -> str | None:
    """What the applied fact is recorded under: the capture's operation, or the refund."""
    ops = state.operations
    if row.type == "refund":
        op = state.operation(row.source_reference) if row.source_reference else None
        return None if op is None else f"refund:{op.refund_id}"
    done = [o for o in ops if o.status == OperationStatus.SUCCEEDED]
    capture = next((o for o in done if o.operation_type == OperationType.CAPTURE), None)
    source = capture or next((o for o in done if o.operation_type == OperationType.AUTHORIZE), None)
    return None if source is None else f"capture:{source.operation_id}"
