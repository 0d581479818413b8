"""Journals: what a valid journal is, and how a batch of drafts is decided against the ledger."""

from __future__ import annotations

from datetime import UTC, date, datetime

from ledger.domain.accounts import AccountKey
from ledger.domain.chain import GENESIS, ChainHead, link
from ledger.domain.journals import (
    JournalDraft,
    JournalKind,
    RejectReason,
    Source,
    SourceType,
    content_digest,
    credit,
    debit,
    journal_problem,
)
from ledger.domain.posting import (
    AlreadyPosted,
    BelowFloor,
    ConflictingDuplicate,
    KnownJournal,
    Posted,
    decide_batch,
    floor_risks,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
PSP = AccountKey("psp_receivable", "EUR")
PENDING = AccountKey("client_deposits_pending", "EUR")
CLIENT = AccountKey("client_mt5_balances", "EUR", "mt5:1")


def draft(reference: str, *entries: object) -> JournalDraft:
    return JournalDraft(
        reference=reference,
        kind=JournalKind.POSTING,
        rule="test",
        business_date=date(2026, 1, 1),
        payment_id="pay_1",
        source=Source.of(SourceType.EVENT, "e", {}),
        entries=tuple(entries),  # type: ignore[arg-type]
    )


def states(balances: dict[AccountKey, int]) -> dict[AccountKey, int]:
    return balances


def test_a_journal_needs_two_entries_balanced_per_currency() -> None:
    """One line, or debits != credits in any currency, is refused; balanced in each currency is fine."""
    assert journal_problem(draft("capture:1", debit(PSP, 5), credit(PENDING, 5)), None) is None
    one = journal_problem(draft("capture:1", debit(PSP, 5)), None)
    assert one is not None and one.reason is RejectReason.TOO_FEW_ENTRIES
    off = journal_problem(draft("capture:1", debit(PSP, 5), credit(PENDING, 4)), None)
    assert off is not None and off.reason is RejectReason.UNBALANCED
    usd = AccountKey("fx_clearing", "USD")
    cross = journal_problem(draft("x:1", debit(PSP, 5), credit(usd, 5)), None)  # 5 EUR != 5 USD
    assert cross is not None and cross.reason is RejectReason.UNBALANCED


def test_accounts_amounts_and_references_are_checked() -> None:
    """Unknown code, holder rules, non-positive or non-int amounts, malformed references."""
    cases = {
        RejectReason.UNKNOWN_ACCOUNT: draft("c:1", debit(AccountKey("cash", "EUR"), 1), credit(PENDING, 1)),
        RejectReason.UNKNOWN_CURRENCY: draft(
            "c:1", debit(AccountKey("psp_receivable", "ZZZ"), 1), credit(PENDING, 1)
        ),
        RejectReason.BAD_AMOUNT: draft("c:1", debit(PSP, 0), credit(PENDING, 0)),
        RejectReason.BAD_REFERENCE: draft("no colon", debit(PSP, 1), credit(PENDING, 1)),
    }
    for expected, bad in cases.items():
        problem = journal_problem(bad, None)
        assert problem is not None and problem.reason is expected, (expected, problem)
    no_holder = draft("c:1", debit(AccountKey("client_mt5_balances", "EUR"), 1), credit(PENDING, 1))
    assert journal_problem(no_holder, None).reason is RejectReason.UNKNOWN_ACCOUNT  # type: ignore[union-attr]
    float_amount = draft("c:1", debit(PSP, 1.0), credit(PENDING, 1.0))  # type: ignore[arg-type]
    assert journal_problem(float_amount, None).reason is RejectReason.BAD_AMOUNT  # type: ignore[union-attr]


def test_content_digest_ignores_entry_order_but_not_amounts_or_accounts() -> None:
    """The digest tells a replay (same reference, same entries) from a conflict."""
    a = content_digest("r:1", [debit(PSP, 5), credit(PENDING, 5)])
    assert a == content_digest("r:1", [credit(PENDING, 5), debit(PSP, 5)])
    assert a != content_digest("r:1", [debit(PSP, 6), credit(PENDING, 6)])
    assert a != content_digest("r:2", [debit(PSP, 5), credit(PENDING, 5)])


def test_decide_assigns_consecutive_ids_and_chains_hashes() -> None:
    """Posted journals follow the head, each linked to the previous one's hash."""
    head = ChainHead(41, b"\x01" * 32)
    drafts = [
        draft("a:1", debit(PSP, 5), credit(PENDING, 5)),
        draft("a:2", debit(PSP, 7), credit(PENDING, 7)),
    ]
    decision = decide_batch(head, drafts, {}, states({PSP: 0, PENDING: 0}), AT)
    first, second = decision.journals
    assert (first.journal_id, second.journal_id) == (42, 43)
    assert first.prev_hash == head.last_hash and second.prev_hash == first.hash
    assert second.hash == link(first.hash, 43, drafts[1], AT)
    assert decision.head == ChainHead(43, second.hash)
    assert decision.deltas == {PSP: 12, PENDING: 12}


def test_a_replay_is_already_posted_and_a_different_content_is_a_conflict() -> None:
    """Same reference and entries: nothing new. Same reference, other amounts: refused, nothing posted.
    Also within one batch."""
    original = draft("capture:1", debit(PSP, 5), credit(PENDING, 5))
    known = {"capture:1": KnownJournal(9, content_digest("capture:1", original.entries))}
    changed = draft("capture:1", debit(PSP, 6), credit(PENDING, 6))
    decision = decide_batch(GENESIS, [original, changed], known, states({PSP: 0, PENDING: 0}), AT)
    assert decision.outcomes == (AlreadyPosted("capture:1", 9), ConflictingDuplicate("capture:1", 9))
    assert decision.journals == () and decision.deltas == {}
    in_batch = decide_batch(GENESIS, [original, original, changed], {}, states({PSP: 0, PENDING: 0}), AT)
    assert [type(o) for o in in_batch.outcomes] == [Posted, AlreadyPosted, ConflictingDuplicate]


def test_floors_are_applied_in_order_against_running_balances() -> None:
    """Balance 10 on a floor-0 account: debits of 6, 6, 4 -> posted, below floor, posted (ends at 0)."""
    drafts = [
        draft(f"mt5-debit:{n}", debit(CLIENT, amount), credit(PENDING, amount))
        for n, amount in enumerate((6, 6, 4))
    ]
    assert floor_risks(drafts) == {CLIENT}  # only this balance must be read (and locked)
    decision = decide_batch(GENESIS, drafts, {}, states({CLIENT: 10}), AT)
    assert [type(o) for o in decision.outcomes] == [Posted, BelowFloor, Posted]
    below = decision.outcomes[1]
    assert below == BelowFloor("mt5-debit:1", CLIENT, 4, -6, 0)
    assert decision.deltas[CLIENT] == -10
    assert [j.journal_id for j in decision.journals] == [1, 2]


def test_normal_sides_assets_grow_with_debits_liabilities_with_credits() -> None:
    """psp_receivable (asset) +5 on a debit; client_deposits_pending (liability) +5 on a credit."""
    decision = decide_batch(
        GENESIS, [draft("a:1", debit(PSP, 5), credit(PENDING, 5))], {}, states({PSP: 0, PENDING: 0}), AT
    )
    assert decision.deltas == {PSP: 5, PENDING: 5}
    refund = draft("r:1", debit(PENDING, 2), credit(PSP, 2))
    assert decide_batch(GENESIS, [refund], {}, states({PSP: 5, PENDING: 5}), AT).deltas == {
        PSP: -2,
        PENDING: -2,
    }
