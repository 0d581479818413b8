"""Posting a batch of journal drafts in the caller's transaction.

The chain head is locked first, so every posting transaction (consumer batches, imports,
corrections, several consumer processes) is serialized from there to its commit: reads of
references and balances are current, ids are gapless, and the hash chain is a chain. The cost is
one lock per *batch*, which is why the consumer posts a whole batch of events in one call.
"""

from __future__ import annotations

from collections import Counter as Counts
from collections.abc import Sequence
from typing import Final

from backbone.invariants import invariant
from prometheus_client import Counter

from ledger.application.ports import LedgerStore
from ledger.domain.chain import GENESIS
from ledger.domain.journals import JournalDraft
from ledger.domain.posting import BatchDecision, Posted, PostingOutcome, decide_batch, floor_risks

JOURNALS_POSTED: Final = Counter("ledger_journals_posted_total", "Journals appended to the ledger", ["rule"])
POSTING_OUTCOMES: Final = Counter(
    "ledger_posting_outcomes_total",
    "Drafts by outcome (Posted, AlreadyPosted, ConflictingDuplicate, BelowFloor)",
    ["outcome"],
)


def post_drafts(store: LedgerStore, drafts: Sequence[JournalDraft]) -> list[PostingOutcome]:
    """Decide and apply ``drafts`` in order; one outcome per draft."""
    decision = decide_drafts(store, drafts)
    apply_decision(store, decision)
    return list(decision.outcomes)


def decide_drafts(store: LedgerStore, drafts: Sequence[JournalDraft]) -> BatchDecision:
    """Lock the chain, read what the decision needs, decide. Nothing is written yet."""
    if not drafts:
        return BatchDecision((), (), {}, GENESIS)
    head, posted_at = store.lock_chain()
    known = store.known_journals({d.reference for d in drafts})
    store.open_accounts({e.account for d in drafts for e in d.entries})
    balances = store.balances_for_update(floor_risks(drafts))
    decision = decide_batch(head, drafts, known, balances, posted_at)
    for name, count in Counts(type(o).__name__ for o in decision.outcomes).items():
        POSTING_OUTCOMES.labels(name).inc(count)
    return decision


def apply_decision(store: LedgerStore, decision: BatchDecision) -> None:
    """Append the decided journals, their balance deltas and their JournalPosted events."""
    posted = [o.journal for o in decision.outcomes if isinstance(o, Posted)]
    invariant(list(decision.journals) == posted, "the journals to append are exactly the posted ones")
    if not decision.journals:
        return
    store.append(decision.journals, decision.deltas, decision.head)
    store.announce(decision.journals)
    for rule, count in Counts(j.draft.rule for j in decision.journals).items():
        JOURNALS_POSTED.labels(rule).inc(count)
