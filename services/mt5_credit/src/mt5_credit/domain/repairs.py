"""Repairs the reconciler sends mt5-credit (``ExecuteRepair`` with target ``mt5_credit``), after two
different people proposed and approved them. Pure decisions over snapshots the application loaded.

- ``mt5_credit``: a captured deposit that never reached the client's MT5 account (``not_credited``).
  A new credit row, its own (``repair:<repair_id>``) business key and so its own deal comment
  ``dep:<row id>``, goes through the normal claim → call → resolve flow; never a balance edit. The
  login must be the deposit intent's (never trust a login from elsewhere), the account the intent
  customer's, and no credit of the deposit may be done already (then there is nothing to repair).
- ``mt5_debit``: a refund or chargeback of a credited deposit never taken back (``not_debited``): a
  new debit row for that refund or chargeback, from the deposit's done credit, its stored FX rate,
  never more than is left to take back.

The command carries the money fact (rebuilt by the reconciler from its read model) so that the row
is what the lost event would have made. Anything else is refused with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from backbone.repairs import RepairCommand, command_for

from mt5_credit.domain.fx import FxQuote
from mt5_credit.domain.intake import (
    Account,
    Captured,
    DepositIntent,
    NewRow,
    OpenCase,
    OriginalCredit,
    TakenBack,
    plan_credit,
    plan_debit,
)
from mt5_credit.domain.model import CreditStatus, DebitReason

TARGET: Final = "mt5_credit"
FACT_OF: Final = {
    "mt5_credit": frozenset({"PaymentCaptured"}),
    "mt5_debit": frozenset({"RefundSucceeded", "ChargebackReceived"}),
}


@dataclass(frozen=True, slots=True)
class RepairRef:
    """What a repair row remembers of its command, to answer it (``RepairOutcome``)."""

    repair_id: int
    case_id: int
    repair_type: str
    command_digest: str
    requested_by: str
    approved_by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "repair_id": self.repair_id,
            "case_id": self.case_id,
            "repair_type": self.repair_type,
            "command_digest": self.command_digest,
            "requested_by": self.requested_by,
            "approved_by": self.approved_by,
        }

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> RepairRef:
        return cls(
            int(raw["repair_id"]),
            int(raw["case_id"]),
            str(raw["repair_type"]),
            str(raw["command_digest"]),
            str(raw["requested_by"]),
            str(raw["approved_by"]),
        )


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


def command_of(payment_id: str, body: Mapping[str, Any]) -> RepairCommand | None:
    """The command when it is mt5-credit's (v1 commands name no target: not ours)."""
    return command_for(TARGET, payment_id, body)


def ref_of(command: RepairCommand) -> RepairRef:
    """What the repair's row keeps of ``command``."""
    return RepairRef(
        command.repair_id,
        command.case_id,
        command.repair_type,
        command.command_digest,
        command.requested_by,
        command.approved_by,
    )


def source_key(ref: RepairRef) -> str:
    return f"repair:{ref.repair_id}"


def check(command: RepairCommand) -> Refused | None:
    """What any repair must be before anything is loaded."""
    repair_type, fact = command.repair_type, command.fact
    if repair_type not in FACT_OF:
        return Refused(f"mt5-credit does not execute {repair_type} repairs")
    if command.same_person:  # never trust the sender
        return Refused("proposed and approved by the same person")
    if command.fact_type not in FACT_OF[repair_type] or fact is None:
        return Refused(
            f"a {repair_type} repair needs its money fact ({', '.join(sorted(FACT_OF[repair_type]))})"
        )
    if not isinstance(command.amount_minor, int) or command.amount_minor <= 0:
        return Refused("amount_minor must be positive")
    if not fact.get("deposit_reference"):
        return Refused("the fact names no deposit: nothing of ours to credit or debit")
    return None


def plan_repair_credit(
    command: RepairCommand,
    intent: DepositIntent | None,
    account: Account | None,
    quote: FxQuote | None,
    done_credit: int | None,
) -> NewRow | Refused:
    """The repair credit row, or why not. ``done_credit``: a credit of the deposit already done."""
    fact = command.fact or {}
    if intent is None:
        return Refused(f"no deposit intent {fact.get('deposit_reference')}")
    if command.mt5_login != intent.mt5_login:
        return Refused(
            f"deposit {intent.deposit_reference} pays login {intent.mt5_login}, not {command.mt5_login}"
        )
    if done_credit is not None:
        return Refused(f"deposit {intent.deposit_reference} is credited already (row {done_credit}, done)")
    if command.currency is not None and command.currency != fact.get("currency"):
        return Refused(
            f"the command is in {command.currency}, the captured payment in {fact.get('currency')}"
        )
    captured = Captured(
        provider=str(fact["provider"]),
        provider_payment_id=str(fact["provider_payment_id"]),
        payment_id=command.payment_id,
        amount_minor=int(command.amount_minor or 0),
        currency=str(fact["currency"]),
        deposit_reference=intent.deposit_reference,
    )
    plan = plan_credit(captured, intent, account, quote, credited_by=None)
    if isinstance(plan, OpenCase):
        return Refused(plan.reason)
    ref = ref_of(command)
    return replace(plan, source_key=source_key(ref), repair=ref)


def plan_repair_debit(command: RepairCommand, original: OriginalCredit | None) -> NewRow | Refused:
    """The repair debit row (for the refund or chargeback the fact names), or why not."""
    fact = command.fact or {}
    chargeback = command.fact_type == "ChargebackReceived"
    reason = DebitReason.CHARGEBACK if chargeback else DebitReason.REFUND
    source_id = str(fact["chargeback_id"] if chargeback else fact["refund_id"])
    if original is None or original.status is not CreditStatus.DONE:
        return Refused(f"deposit {fact.get('deposit_reference')} has no done credit to take back from")
    if command.mt5_login is not None and command.mt5_login != original.mt5_login:
        return Refused(f"the deposit was credited to login {original.mt5_login}, not {command.mt5_login}")
    taken = TakenBack(
        reason=reason,
        source_id=source_id,
        provider=str(fact["provider"]),
        payment_id=command.payment_id,
        amount_minor=int(command.amount_minor or 0),
        currency=str(fact["currency"]),
        deposit_reference=str(fact["deposit_reference"]),
    )
    plan = plan_debit(taken, original)
    if isinstance(plan, OpenCase):
        return Refused(plan.reason)
    ref = ref_of(command)
    return replace(plan, source_key=source_key(ref), repair=ref)
