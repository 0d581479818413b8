"""Repairs of cases, and the maker-checker rules the server enforces (seed 000: "由服务器强制保证这是
两个不同的人"; seed 002 §6.2: every change to money data is approved and logged).

A repair is proposed against one case by one operator (the maker) as an exact command: its type,
the record it repairs (the case's source key), the amount and currency, the MT5 login, the payment
and the reason. The command has a digest; an approval names the digest the checker saw, so an
approval is bound to that exact command and is used once. Amending a proposal makes a new command
(a new digest, a new revision): an approval of the old one does not carry over.

Who may approve: anyone with the permission except the maker, whatever the maker's own permissions.
There is no bypass. Every refusal is a ``RepairRefused`` with an HTTP-like status and a reason.

Each repair is unique per ``(source_key, repair_type)``: the same repair proposed twice is the same
repair, and executing it twice is one execution (the executing service dedupes on the repair id).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final

from reconciler.domain.cases import CaseClass, CaseStatus

REASON_MAX: Final = 500


class RepairType(StrEnum):
    CLOSE = "close"  # no money moves: the case is closed with a reason (e.g. a PSP report error)
    POST_JOURNAL = "post_journal"  # the ledger posts the journal a money fact lacks
    MT5_CREDIT = "mt5_credit"  # mt5-credit credits the account through its claim → call → resolve flow
    MT5_DEBIT = "mt5_debit"  # mt5-credit takes money back the same way
    APPLY_PROVIDER_FACT = "apply_provider_fact"  # payment-state applies a verified fact it missed


class RepairStatus(StrEnum):
    PROPOSED = "proposed"  # waiting for a checker
    REJECTED = "rejected"  # a checker refused it, with a reason (the maker may amend it)
    SENT = "sent"  # approved; ExecuteRepair is on its way to the owning service
    EXECUTED = "executed"  # the owning service did it (a close is executed at approval)
    REFUSED = "refused"  # the owning service refused it, with a reason
    UNKNOWN = "unknown"  # the owning service could not tell; a person looks


AMENDABLE: Final = frozenset({RepairStatus.PROPOSED, RepairStatus.REJECTED})

# who executes each type (ExecuteRepair's target), and which case classes it can repair
TARGET: Final[dict[RepairType, str]] = {
    RepairType.CLOSE: "reconciler",
    RepairType.POST_JOURNAL: "ledger",
    RepairType.MT5_CREDIT: "mt5_credit",
    RepairType.MT5_DEBIT: "mt5_credit",
    RepairType.APPLY_PROVIDER_FACT: "payment_state",
}
REPAIRS_OF: Final[dict[RepairType, frozenset[CaseClass]]] = {
    RepairType.CLOSE: frozenset(CaseClass),
    RepairType.POST_JOURNAL: frozenset({CaseClass.MISSING_JOURNAL}),
    # a done credit whose deal is gone is not repaired by a second credit: the books already hold it
    RepairType.MT5_CREDIT: frozenset({CaseClass.NOT_CREDITED}),
    RepairType.MT5_DEBIT: frozenset({CaseClass.NOT_DEBITED}),
    RepairType.APPLY_PROVIDER_FACT: frozenset({CaseClass.EXTERNAL_ONLY}),
}
# where the money a case explains sits in its evidence: (record, amount field)
_EXPLAINED_BY: Final[dict[CaseClass, tuple[tuple[str, str], ...]]] = {
    CaseClass.MISSING_JOURNAL: (("fact", "amount_minor"), ("operation", "amount_minor")),
    CaseClass.NOT_CREDITED: (("fact", "amount_minor"),),
    CaseClass.CREDIT_WITHOUT_DEAL: (("operation", "amount_minor"),),
    CaseClass.NOT_DEBITED: (("fact", "amount_minor"),),
    CaseClass.EXTERNAL_ONLY: (("settlement", "gross_minor"),),
}


class RepairRefused(Exception):
    """The server refuses the act; nothing changes (the attempt is audited). ``audited``: the
    audit's reason when it says more than the caller is told (another merchant's case is, to its
    caller, a case that does not exist)."""

    def __init__(self, status: int, error: str, detail: str, audited: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail
        self.audited = audited or f"{error}: {detail}"


@dataclass(frozen=True, slots=True)
class CaseView:
    case_id: int
    case_key: str
    case_class: CaseClass
    status: CaseStatus
    evidence: dict[str, Any]
    merchant_id: str | None = None  # the merchant its records name (None: none, or several)

    @property
    def source_key(self) -> str:
        """The record the case is about: its key without the class prefix."""
        return self.case_key.split(":", 1)[1]


@dataclass(frozen=True, slots=True)
class Explained:
    amount_minor: int
    currency: str
    payment_id: str | None


@dataclass(frozen=True, slots=True)
class ProposedCommand:
    """The exact command a maker proposes and a checker approves (everything in it is in the
    digest). Approved, it goes out as ``ExecuteRepair`` with its repair id, maker, checker and
    digest, which the executing services read as ``backbone.repairs.RepairCommand``."""

    repair_type: RepairType
    case_id: int
    source_key: str
    target: str
    amount_minor: int | None
    currency: str | None
    mt5_login: int | None
    payment_id: str | None
    reason: str
    fact_type: str | None = None  # post_journal: the money fact the journal books, as its event
    fact: dict[str, Any] | None = None

    @property
    def digest(self) -> str:
        return command_digest(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"repair_type": self.repair_type.value}


@dataclass(frozen=True, slots=True)
class RepairView:
    repair_id: int
    case_id: int
    status: RepairStatus
    command: ProposedCommand
    proposed_by: str
    revision: int


def command_digest(command: ProposedCommand) -> str:
    """SHA-256 (hex) of the command's canonical JSON: sorted keys, no whitespace."""
    canonical = json.dumps(command.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def explained(case: CaseView) -> Explained | None:
    """The money a case explains (what a repair may move at most), from its evidence."""
    for record, field in _EXPLAINED_BY.get(case.case_class, ()):
        found = case.evidence.get(record)
        if isinstance(found, dict) and isinstance(found.get(field), int):
            payment = found.get("payment_id", found.get("reference"))  # a settlement row: our reference
            payment = payment if isinstance(payment, str) and payment else None
            return Explained(abs(int(found[field])), str(found.get("currency", "")), payment)
    return None


def command_for(
    case: CaseView,
    repair_type: RepairType,
    *,
    reason: str,
    amount_minor: int | None = None,
    currency: str | None = None,
    mt5_login: int | None = None,
) -> ProposedCommand:
    """The command proposed against ``case``, or RepairRefused saying why it cannot be."""
    reason = reason.strip()
    if not reason or len(reason) > REASON_MAX:
        raise RepairRefused(400, "bad_repair", f"reason: why, 1-{REASON_MAX} characters")
    if case.status is CaseStatus.RESOLVED:
        raise RepairRefused(409, "case_resolved", f"case {case.case_id} is resolved: nothing to repair")
    if case.case_class not in REPAIRS_OF[repair_type]:
        fits = sorted(t.value for t, classes in REPAIRS_OF.items() if case.case_class in classes)
        raise RepairRefused(
            422,
            "repair_does_not_fit",
            f"a {repair_type.value} repair cannot repair a {case.case_class.value} case"
            f" (fits: {', '.join(fits)})",
        )
    if repair_type is RepairType.CLOSE:
        if amount_minor is not None or currency is not None or mt5_login is not None:
            raise RepairRefused(400, "bad_repair", "a close moves no money: no amount, currency or login")
        return ProposedCommand(
            repair_type, case.case_id, case.source_key, "reconciler", None, None, None, None, reason
        )
    money = explained(case)
    if money is None:
        raise RepairRefused(422, "nothing_explained", f"case {case.case_id}'s evidence explains no amount")
    amount = _amount(money, amount_minor, currency)
    fact_type, fact = None, None
    if repair_type is RepairType.APPLY_PROVIDER_FACT:
        fact_type, fact = settlement_fact(case)
    else:  # the money fact the executing service's rules read (the deposit, its payment, its refund)
        fact_type, fact = fact_event(case)
    whole = repair_type in (RepairType.POST_JOURNAL, RepairType.APPLY_PROVIDER_FACT)
    if whole and amount != money.amount_minor:  # the fact as it is, or it would conflict
        raise RepairRefused(
            422, "fact_is_whole", f"a {repair_type.value} repair moves the whole fact: {money.amount_minor}"
        )
    needs_login = repair_type in (RepairType.MT5_CREDIT, RepairType.MT5_DEBIT)
    login = mt5_login if mt5_login is not None else _login_of(case)
    if needs_login and (not isinstance(login, int) or isinstance(login, bool) or login <= 0):
        raise RepairRefused(400, "bad_repair", "an MT5 repair needs the mt5_login it moves money on")
    return ProposedCommand(
        repair_type,
        case.case_id,
        case.source_key,
        TARGET[repair_type],
        amount,
        money.currency,
        login if needs_login else None,
        money.payment_id,
        reason,
        fact_type,
        fact,
    )


def _amount(money: Explained, amount_minor: int | None, currency: str | None) -> int:
    """What a money repair moves: positive, at most what the case explains, in its currency."""
    amount = money.amount_minor if amount_minor is None else amount_minor
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise RepairRefused(400, "bad_repair", "amount_minor must be a positive integer")
    if amount > money.amount_minor:
        raise RepairRefused(
            422,
            "amount_above_case",
            f"amount {amount} is more than the case explains ({money.amount_minor} {money.currency})",
        )
    if currency is not None and currency != money.currency:
        raise RepairRefused(
            422, "currency_differs", f"the case's money is in {money.currency}, not {currency}"
        )
    return amount


def fact_event(case: CaseView) -> tuple[str, dict[str, Any]]:
    """The event the ledger missed, rebuilt from the reconciler's read model of it (the fields the
    ledger's posting rule for that event reads), so the repair books exactly that journal under the
    fact's own reference: if the lost event arrives later, it is the same journal, posted once."""
    fact = case.evidence.get("fact")
    if not isinstance(fact, dict):
        raise RepairRefused(
            422,
            "not_yet_supported",
            "post_journal repairs money facts (captures, refunds, chargebacks, payouts); a missing journal"
            " of an MT5 operation needs its deposit reference, which the reconciler does not keep yet",
        )
    kind, key = str(fact["kind"]), str(fact["source_key"]).split(":", 1)[1]
    common = {
        "merchant_id": fact["merchant_id"],
        "provider": fact["provider"],
        "amount_minor": fact["amount_minor"],
        "currency": fact["currency"],
        "deposit_reference": fact.get("deposit_reference"),
    }
    if kind == "capture":
        return "PaymentCaptured", common | {
            "operation_id": key,
            "provider_payment_id": fact["provider_object_id"],
        }
    if kind == "refund":
        body = {"refund_id": key, "operation_id": "", "provider_refund_id": fact["provider_object_id"]}
        return "RefundSucceeded", common | body
    if kind in ("payout", "payout_return"):  # a withdrawal's: its payment id is the withdrawal id
        payout = {k: v for k, v in common.items() if k != "deposit_reference"} | {
            "withdrawal_id": fact["payment_id"],
            "operation_id": "",  # not kept by the reconciler; the ledger's rule books without it
            "provider_payout_id": fact["provider_object_id"],
        }
        if kind == "payout":
            return "PayoutPaid", payout
        return "PayoutReturned", payout | {"failure_code": None}
    if kind != "chargeback":
        raise RepairRefused(422, "not_yet_supported", f"post_journal does not rebuild a {kind[:40]} fact")
    return "ChargebackReceived", common | {
        "chargeback_id": key,
        "provider_dispute_id": fact["provider_object_id"],
        "reason": None,
    }


SETTLEMENT_FIELDS: Final = (
    "source_key",
    "balance_transaction_id",
    "type",
    "payment_intent_id",
    "source_id",
    "reference",
    "source_reference",
    "currency",
    "gross_minor",
    "fee_minor",
    "net_minor",
    "payout_batch_id",
    "created_at_ms",
)


def settlement_fact(case: CaseView) -> tuple[str, dict[str, Any]]:
    """What the PSP's settlement report says happened (an external-only row): payment-state does
    not trust it as such; it looks the object up at the PSP and applies what the PSP answers."""
    row = case.evidence.get("settlement")
    if not isinstance(row, dict) or not row.get("reference"):
        raise RepairRefused(
            422, "no_reference", "the settlement row names no payment of ours: close it, or repair by hand"
        )
    return "SettlementRow", {name: row.get(name) for name in SETTLEMENT_FIELDS}


def _login_of(case: CaseView) -> int | None:
    for record in ("operation", "credit", "debit"):
        found = case.evidence.get(record)
        if isinstance(found, dict) and isinstance(found.get("mt5_login"), int):
            return int(found["mt5_login"])
    return None


def check_amend(repair: RepairView) -> None:
    if repair.status not in AMENDABLE:
        raise RepairRefused(
            409,
            "repair_not_amendable",
            f"repair {repair.repair_id} is {repair.status.value}: propose no change",
        )


def check_approve(repair: RepairView, checker: str, seen_digest: str) -> None:
    """The checker may approve exactly the command they saw, once, and never their own."""
    if checker == repair.proposed_by:
        raise RepairRefused(
            403,
            "maker_cannot_approve",
            f"{checker} proposed repair {repair.repair_id}: a second person approves",
        )
    if repair.status is not RepairStatus.PROPOSED:
        raise RepairRefused(
            409, "not_awaiting_approval", f"repair {repair.repair_id} is {repair.status.value}, not proposed"
        )
    if seen_digest != repair.command.digest:
        raise RepairRefused(
            409,
            "command_changed",
            f"repair {repair.repair_id}'s command is not the one seen (now revision {repair.revision}):"
            " look again",
        )


def check_reject(repair: RepairView, checker: str, reason: str) -> str:
    reason = reason.strip()
    if not reason or len(reason) > REASON_MAX:
        raise RepairRefused(400, "bad_repair", f"reason: why, 1-{REASON_MAX} characters")
    if checker == repair.proposed_by:
        raise RepairRefused(
            403, "maker_cannot_reject", f"{checker} proposed repair {repair.repair_id}: amend it instead"
        )
    if repair.status is not RepairStatus.PROPOSED:
        raise RepairRefused(
            409, "not_awaiting_approval", f"repair {repair.repair_id} is {repair.status.value}, not proposed"
        )
    return reason
