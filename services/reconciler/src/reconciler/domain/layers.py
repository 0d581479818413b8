"""Matching layers as data: which records are paired with which, on which keys, and which case class
each difference makes. An adapter turns a description into set-based SQL; the description is the
decision, the SQL only carries it out.

A ``Pairing`` pairs each record of the date on its left with at most one record on its right:

- the candidates of a left record are the right records whose ``keys`` equal its own; of several,
  the one lowest by ``preference`` is its pair, and a right record is the pair of one left record at
  most (of several lefts that want it, the first stored wins);
- a left record with no pair past the grace period makes ``unmatched`` (its key: the left's
  ``key``); within the grace period it is only counted (``in_flight``), still in flight;
- a pair whose ``compared`` fields differ makes ``differs``; a right record whose first compared
  field is unset names no amount of its own and is not compared.

Fields are named as the records of ``domain.records`` name them (checked when a description is
made), a summary is text and fields of either side, and a finding's evidence is the records by
their ``role``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final, Literal

from reconciler.domain.cases import CaseClass
from reconciler.domain.records import MoneyFact, Mt5Operation

PairedRecord = type[MoneyFact] | type[Mt5Operation]
LEFT: Final = "left"
RIGHT: Final = "right"


@dataclass(frozen=True, slots=True)
class Field:
    """A field of one side's record, in a summary."""

    side: Literal["left", "right"]
    name: str


def left(name: str) -> Field:
    return Field(LEFT, name)


def right(name: str) -> Field:
    return Field(RIGHT, name)


Summary = tuple[str | Field, ...]


@dataclass(frozen=True, slots=True)
class Side:
    """Which records take part on one side: of which record type and kinds, with which fields set
    (``present``) and unset (``absent``); ``role`` names the record in a finding's evidence."""

    record: PairedRecord
    role: str
    kinds: tuple[str, ...]
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    key: str = "source_key"  # what a case of the record is keyed by
    at: str = "occurred_at_ms"  # when it happened: the grace period counts from here

    def __post_init__(self) -> None:
        _known(self.record, self.present, self.absent, (self.key, self.at))


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """The case a kind of difference makes, and its summary."""

    case_class: CaseClass
    summary: Summary


@dataclass(frozen=True, slots=True)
class Pairing:
    """One matching layer of records paired one to one (see the module's docstring)."""

    name: str  # the layer's name in a run's counts and timings
    pairs: str  # the name its pairs are stored under (``matches.layer``)
    left: Side
    right: Side
    keys: tuple[tuple[str, str], ...]  # (left field, right field): equal on a candidate pair
    preference: str  # a right field: of a left's candidates, the lowest is its pair
    compared: tuple[tuple[str, str], ...]  # (left field, right field): a pair differs if any differs
    matched: str  # the count of pairs
    in_flight: str  # the count of unpaired left records within the grace period
    unmatched: Discrepancy  # an unpaired left record past the grace period (no right in its summary)
    differs: Discrepancy  # a pair whose compared fields differ

    def __post_init__(self) -> None:
        for pairs in (self.keys, self.compared):
            _known(self.left.record, tuple(name for name, _ in pairs))
            _known(self.right.record, tuple(name for _, name in pairs), (self.preference,))
        sides = {LEFT: self.left.record, RIGHT: self.right.record}
        for discrepancy, allowed in ((self.unmatched, (LEFT,)), (self.differs, (LEFT, RIGHT))):
            for part in discrepancy.summary:
                if isinstance(part, Field):
                    if part.side not in allowed:
                        raise ValueError(f"{self.name}: {discrepancy.case_class} has no {part.side} record")
                    _known(sides[part.side], (part.name,))


def _known(record: PairedRecord, *names: tuple[str, ...]) -> None:
    have = {f.name for f in fields(record)}
    unknown = [name for group in names for name in group if name not in have]
    if unknown:
        raise ValueError(f"{record.__name__} has no field {', '.join(unknown)}")


# A captured deposit and the MT5 credit that paid it, by payment. A withdrawal's give-back credit
# (wbk:) pays no capture, even when keyed by the card deposit's payment.
CREDITS: Final = Pairing(
    name="credits",
    pairs="capture_credit",
    left=Side(MoneyFact, "fact", ("capture",), present=("deposit_reference",)),
    right=Side(Mt5Operation, "credit", ("credit",), absent=("withdrawal_id",)),
    keys=(("payment_id", "payment_id"),),
    preference="row_id",
    compared=(("amount_minor", "payment_amount_minor"), ("currency", "payment_currency")),
    matched="captures_credited",
    in_flight="credits_in_flight",
    unmatched=Discrepancy(
        CaseClass.NOT_CREDITED,
        (
            "captured deposit ",
            left("deposit_reference"),
            " (",
            left("amount_minor"),
            " ",
            left("currency"),
            ") has no MT5 credit",
        ),
    ),
    differs=Discrepancy(
        CaseClass.CREDIT_AMOUNT_MISMATCH,
        (
            right("source_key"),
            " pays ",
            right("payment_amount_minor"),
            " ",
            right("payment_currency"),
            " of a capture of ",
            left("amount_minor"),
            " ",
            left("currency"),
        ),
    ),
)

# A refund or chargeback of a deposit and the MT5 debit that took it back, by the fact's own key
# (the debit names it as its cause).
TAKEBACKS: Final = Pairing(
    name="takebacks",
    pairs="takeback_debit",
    left=Side(MoneyFact, "fact", ("refund", "chargeback"), present=("deposit_reference",)),
    right=Side(Mt5Operation, "debit", ("debit",)),
    keys=(("source_key", "cause_key"),),
    preference="row_id",
    compared=(("amount_minor", "payment_amount_minor"), ("currency", "payment_currency")),
    matched="takebacks_debited",
    in_flight="debits_in_flight",
    unmatched=Discrepancy(
        CaseClass.NOT_DEBITED,
        (
            left("kind"),
            " ",
            left("source_key"),
            " of deposit ",
            left("deposit_reference"),
            " (",
            left("amount_minor"),
            " ",
            left("currency"),
            ") was never taken back from MT5",
        ),
    ),
    differs=Discrepancy(
        CaseClass.DEBIT_AMOUNT_MISMATCH,
        (
            right("source_key"),
            " takes back ",
            right("payment_amount_minor"),
            " ",
            right("payment_currency"),
            " of ",
            left("source_key"),
            " (",
            left("amount_minor"),
            " ",
            left("currency"),
            ")",
        ),
    ),
)
