"""Discrepancy classes, their severity, and how a run's findings move the case queue.

A finding is one discrepancy a run found, named by a stable case key ``<class>:<record key>``: the
same discrepancy found by another run of the date has the same key, so re-running a date never
duplicates a case. The evidence (the records side by side) has a digest; a case is updated only
when its evidence changed.

Transitions (``decide``):
- a new key: the case is opened;
- an open or acknowledged case found again: unchanged, or its evidence updated;
- a resolved case found again with the same evidence: stays resolved (a person closed it knowing
  this); with different evidence: reopened;
- an open or acknowledged case of the date that a complete run no longer finds: resolved by the
  reconciler (the evidence was fixed). An incomplete run resolves nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final


class CaseClass(StrEnum):
    # layer 1: what a service's resolver could not settle, by age, with what it last said
    STALE_OPERATION = "stale_operation"  # a payment operation still UNKNOWN/open after its resolver gave up
    STALE_MT5_OPERATION = "stale_mt5_operation"  # an MT5 credit/debit still unknown (or failed) for a person
    NEEDS_ATTENTION = "needs_attention"  # a provider fact that contradicts our state, for a person
    # layer 2
    EXTERNAL_ONLY = "external_only"  # the PSP settled it, we have no such money fact (lost webhook)
    INTERNAL_ONLY = "internal_only"  # a money fact of ours the settlement report lacks
    AMOUNT_MISMATCH = "amount_mismatch"
    CURRENCY_MISMATCH = "currency_mismatch"
    DUPLICATE_REFERENCE = "duplicate_reference"  # two settlement rows for one provider object
    NOT_CREDITED = "not_credited"  # a captured deposit with no MT5 credit past the grace period
    CREDIT_AMOUNT_MISMATCH = "credit_amount_mismatch"  # the credit pays another amount than captured
    NOT_DEBITED = "not_debited"  # a refund or chargeback of a deposit never taken back from MT5
    DEBIT_AMOUNT_MISMATCH = "debit_amount_mismatch"  # the debit takes back another amount
    # withdrawals (ADR 0008): the money left the PSP without leaving MT5, or came back and stayed
    PAYOUT_WITHOUT_DEBIT = "payout_without_debit"  # a paid payout whose withdrawal has no MT5 debit
    RETURN_NOT_GIVEN_BACK = "return_not_given_back"  # a returned payout with no give-back credit
    CREDIT_WITHOUT_DEAL = "credit_without_deal"  # a done credit/debit whose MT5 deal is missing
    DEAL_WITHOUT_RECORD = "deal_without_record"  # a deal with our reference prefix nobody explains
    DEAL_WITHOUT_REFERENCE = "deal_without_reference"  # a balance deal with no reference of ours
    TWO_DEALS_ONE_REFERENCE = "two_deals_one_reference"
    DEAL_ON_OTHER_LOGIN = "deal_on_other_login"
    DEAL_AMOUNT_MISMATCH = "deal_amount_mismatch"
    MISSING_JOURNAL = "missing_journal"  # a money fact the books lack
    UNBALANCED_JOURNAL = "unbalanced_journal"
    BANK_DEPOSIT_MISSING = "bank_deposit_missing"
    BANK_DEPOSIT_DIFFERENT = "bank_deposit_different"
    BANK_DEPOSIT_UNEXPECTED = "bank_deposit_unexpected"


class Severity(StrEnum):
    HIGH = "high"  # money may be missing or extra somewhere: P0
    MEDIUM = "medium"  # the records disagree, money is accounted for elsewhere


SEVERITY: Final[dict[CaseClass, Severity]] = {
    c: Severity.MEDIUM
    for c in (
        CaseClass.INTERNAL_ONLY,
        CaseClass.DUPLICATE_REFERENCE,
        CaseClass.MISSING_JOURNAL,
        CaseClass.DEAL_WITHOUT_REFERENCE,
    )
} | {
    c: Severity.HIGH
    for c in CaseClass
    if c
    not in (
        CaseClass.INTERNAL_ONLY,
        CaseClass.DUPLICATE_REFERENCE,
        CaseClass.MISSING_JOURNAL,
        CaseClass.DEAL_WITHOUT_REFERENCE,
    )
}


class CaseStatus(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Finding:
    case_key: str
    case_class: CaseClass
    summary: str
    evidence: dict[str, Any]  # the records side by side, JSON

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.case_class]

    @property
    def digest(self) -> bytes:
        return evidence_digest(self.evidence)


@dataclass(frozen=True, slots=True)
class KnownCase:
    case_id: int
    case_key: str
    status: CaseStatus
    digest: bytes


@dataclass(frozen=True, slots=True)
class Open:
    finding: Finding


@dataclass(frozen=True, slots=True)
class Unchanged:
    case_id: int


@dataclass(frozen=True, slots=True)
class UpdateEvidence:
    case_id: int
    finding: Finding


@dataclass(frozen=True, slots=True)
class Reopen:
    case_id: int
    finding: Finding


@dataclass(frozen=True, slots=True)
class ResolveFixed:
    case_id: int
    case_key: str


CaseAction = Open | Unchanged | UpdateEvidence | Reopen | ResolveFixed


def evidence_digest(evidence: dict[str, Any]) -> bytes:
    return hashlib.sha256(json.dumps(evidence, sort_keys=True, default=str).encode()).digest()


def decide(
    findings: list[Finding], known: dict[str, KnownCase], open_of_date: list[KnownCase], *, complete: bool
) -> list[CaseAction]:
    """What the run does to the queue. ``known``: the cases with a key among the findings;
    ``open_of_date``: the open/acknowledged cases of the date (the ones a clean re-run resolves)."""
    actions: list[CaseAction] = []
    found = set()
    for f in findings:
        found.add(f.case_key)
        case = known.get(f.case_key)
        if case is None:
            actions.append(Open(f))
        elif case.digest == f.digest:
            actions.append(Unchanged(case.case_id))
        elif case.status is CaseStatus.RESOLVED:
            actions.append(Reopen(case.case_id, f))
        else:
            actions.append(UpdateEvidence(case.case_id, f))
    if complete:
        actions.extend(ResolveFixed(c.case_id, c.case_key) for c in open_of_date if c.case_key not in found)
    return actions
