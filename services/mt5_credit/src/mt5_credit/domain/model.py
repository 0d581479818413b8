"""Credit rows and their life: the states, the MT5 comment, and which transitions exist.

A *credit row* is one balance operation we intend to perform on one MT5 account: a deposit credit
(one per PSP payment) or a debit (one per refund or chargeback, linked to the credit it reverses).
Amounts are always positive minor units of the MT5 account's currency; the direction is the kind.

Invariants kept here:
- the MT5 comment of a row is a pure function of its kind and id, so every attempt carries the same
  one, and it always fits MT5's 31 characters;
- ``unknown`` never goes straight back to ``pending`` except on a complete *absent* lookup, and an
  expired lease means ``unknown``, never ``pending`` (the dead worker may have reached MT5).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Final

from backbone.invariants import invariant

MT5_COMMENT_CHARS_MAX: Final = 31  # MT5 cuts a deal comment silently at 31 characters


class CreditKind(StrEnum):
    CREDIT = "credit"  # money onto the account: a captured deposit
    DEBIT = "debit"  # money off the account: a refund or a chargeback of a credited deposit


class DebitReason(StrEnum):
    REFUND = "refund"
    CHARGEBACK = "chargeback"
    WITHDRAWAL = "withdrawal"  # a client's withdrawal (docs/adr/0008): reverses no credit


class CreditReason(StrEnum):
    DEPOSIT = "deposit"  # a captured deposit (also a repair credit for one)
    WITHDRAWAL_RETURN = "withdrawal_return"  # a withdrawal's payout failed or came back


class CreditStatus(StrEnum):
    PENDING = "pending"  # may be claimed; MT5 has (provably) not got this operation
    CLAIMED = "claimed"  # one worker holds a lease and may be calling MT5 right now
    UNKNOWN = "unknown"  # MT5 may or may not have applied it: only a lookup decides
    DONE = "done"  # MT5 confirmed; the deal ticket is stored
    FAILED = "failed"  # MT5 (or our pre-check) clearly refused; a person looks at it


_TRANSITIONS: Final[dict[CreditStatus, frozenset[CreditStatus]]] = {
    CreditStatus.PENDING: frozenset({CreditStatus.CLAIMED, CreditStatus.FAILED}),
    CreditStatus.CLAIMED: frozenset({CreditStatus.DONE, CreditStatus.FAILED, CreditStatus.UNKNOWN}),
    # A late, definite answer from the worker whose lease expired still counts (DONE/FAILED);
    # PENDING only through a complete "absent" lookup.
    CreditStatus.UNKNOWN: frozenset({CreditStatus.DONE, CreditStatus.FAILED, CreditStatus.PENDING}),
    CreditStatus.DONE: frozenset(),
    CreditStatus.FAILED: frozenset(),
}

_COMMENT_PREFIX: Final[dict[CreditKind, str]] = {CreditKind.CREDIT: "dep:", CreditKind.DEBIT: "dbt:"}
# Withdrawal rows have their own references, so a deal says what it was without our database.
WITHDRAWAL_PREFIX: Final = "wdr:"
WITHDRAWAL_RETURN_PREFIX: Final = "wbk:"


def can_move(current: CreditStatus, target: CreditStatus) -> bool:
    """Whether ``current -> target`` is a transition of the credit state machine."""
    return target in _TRANSITIONS[current]


def mt5_comment(kind: CreditKind, row_id: int, *, withdrawal: bool = False) -> str:
    """The compact reference written into the MT5 deal comment: ``dep:<id>`` or ``dbt:<id>``; for a
    withdrawal's debit ``wdr:<id>`` and for its give-back credit ``wbk:<id>``."""
    invariant(row_id > 0, f"row id must be positive, got {row_id}")
    if withdrawal:
        prefix = WITHDRAWAL_PREFIX if kind is CreditKind.DEBIT else WITHDRAWAL_RETURN_PREFIX
    else:
        prefix = _COMMENT_PREFIX[kind]
    comment = f"{prefix}{row_id}"
    invariant(len(comment) <= MT5_COMMENT_CHARS_MAX, f"comment {comment!r} longer than MT5 keeps")
    return comment


def signed_amount_minor(kind: CreditKind, amount_minor: int) -> int:
    """The amount as MT5's balance operation takes it: positive credits, negative debits."""
    invariant(amount_minor > 0, f"a credit row's amount is positive, got {amount_minor}")
    return amount_minor if kind is CreditKind.CREDIT else -amount_minor


@dataclass(frozen=True)
class CreditRow:
    """A credit row as the executor, the resolver and the events see it: one name for one row, from
    the store to the events (``claim_token`` says which claim it was read under)."""

    id: int
    kind: CreditKind
    status: CreditStatus
    payment_id: str
    deposit_reference: str
    provider: str
    provider_payment_id: str | None
    debit_reason: str | None
    source_reference: str | None
    original_credit_id: int | None
    mt5_login: int
    customer_id: str
    amount_minor: int
    currency: str
    payment_amount_minor: int
    payment_currency: str
    fx_rate: Decimal | None
    attempts: int
    claim_token: str | None
    first_claimed_at_ms: int | None
    claimed_at_ms: int | None
    silent_lookups: int  # lookups with no answer since unknown, named as its column until that is renamed
    mt5_deal_ticket: int | None
    repair_id: int | None = None  # set on a row that executes an approved repair
    credit_reason: CreditReason = CreditReason.DEPOSIT
    withdrawal_id: str | None = None  # set on a withdrawal's debit and on its give-back credit
    fact_at_ms: int | None = None  # when its money fact happened at the source (capture, refund, ...)

    @property
    def comment(self) -> str:
        """The MT5 deal comment of this row, the same on every attempt."""
        return mt5_comment(self.kind, self.id, withdrawal=self.withdrawal_id is not None)
