"""Posting rules: which journal each money fact books, and which facts are refused (and why)."""

from __future__ import annotations

from datetime import date
from zoneinfo import ZoneInfo

from ledger.domain.accounts import AccountKey, Direction
from ledger.domain.journals import JournalDraft, Rejected, RejectReason, SourceType
from ledger.domain.rule_base import EventMeta, Ignored, PostingPolicy, RuleResult
from ledger.domain.rules import draft_for_event
from ledger.testing.facts import Fact, deposit, with_body

POLICY = PostingPolicy()


def post(fact: Fact, policy: PostingPolicy = POLICY) -> RuleResult:
    meta = EventMeta(fact.event_id, fact.event_type, fact.payment_id, fact.occurred_at_ms, "test", "t", 1, 7)
    return draft_for_event(meta, fact.body, policy)


def lines(result: RuleResult) -> list[tuple[str, str, str, str, int]]:
    assert isinstance(result, JournalDraft), result
    return [
        (e.account.code, e.account.currency, e.account.holder, e.direction.value, e.amount_minor)
        for e in result.entries
    ]


def test_capture_books_psp_receivable_against_client_deposits_pending() -> None:
    """A captured deposit: the PSP owes us the money, and we owe it to the client until MT5 has it."""
    captured = deposit(1, amount_minor=12_345)[0]
    result = post(captured)
    assert lines(result) == [
        ("psp_receivable", "EUR", "", "debit", 12_345),
        ("client_deposits_pending", "EUR", "", "credit", 12_345),
    ]
    assert isinstance(result, JournalDraft)
    assert result.reference == "capture:op_cap_1"
    assert result.payment_id == "pay_1"
    assert result.source.source_type is SourceType.EVENT
    assert result.source.source_id == captured.event_id
    assert result.source.detail_dict()["offset"] == 7


def test_capture_without_a_deposit_books_unallocated_receipts() -> None:
    """A payment that pays no deposit intent is client money nobody is to be credited with yet."""
    assert lines(post(deposit(1, ending="not_deposit")[0]))[1][0] == "unallocated_receipts"


def test_mt5_credit_moves_the_money_to_the_clients_login_account() -> None:
    """Credited: the obligation moves from pending to the client's MT5 account (one per login)."""
    credited = deposit(1, login=555, amount_minor=500)[1]
    assert lines(post(credited)) == [
        ("client_deposits_pending", "EUR", "", "debit", 500),
        ("client_mt5_balances", "EUR", "mt5:555", "credit", 500),
    ]


def test_mt5_credit_in_another_currency_goes_through_fx_clearing_balanced_per_currency() -> None:
    """EUR 100.00 credited as USD 108.50 at 1.085: each currency balances on its own."""
    credited = deposit(1, login=9, amount_minor=10_000, mt5_currency="USD", fx_rate="1.085")[1]
    assert lines(post(credited)) == [
        ("client_deposits_pending", "EUR", "", "debit", 10_000),
        ("fx_clearing", "EUR", "", "credit", 10_000),
        ("fx_clearing", "USD", "", "debit", 10_850),
        ("client_mt5_balances", "USD", "mt5:9", "credit", 10_850),
    ]


def test_refund_and_its_mt5_debit_clear_the_deposit() -> None:
    """Refund: the PSP owes us less and pending goes negative until MT5 gives the money back."""
    _, _, refund, debit = deposit(1, login=3, amount_minor=700, ending="refunded", returned_minor=200)
    assert lines(post(refund)) == [
        ("client_deposits_pending", "EUR", "", "debit", 200),
        ("psp_receivable", "EUR", "", "credit", 200),
    ]
    assert lines(post(debit)) == [
        ("client_mt5_balances", "EUR", "mt5:3", "debit", 200),
        ("client_deposits_pending", "EUR", "", "credit", 200),
    ]


def test_chargeback_books_like_a_refund_and_repairs_go_to_suspense() -> None:
    """Chargeback: the PSP takes the money back. A repair debit is explained through mt5_suspense."""
    chargeback = deposit(1, ending="charged_back")[2]
    assert isinstance(post(chargeback), JournalDraft)
    assert post(chargeback).reference == "chargeback:cb_1"  # type: ignore[union-attr]
    repair = deposit(2, ending="repaired")[2]
    assert lines(post(repair))[1][0] == "mt5_suspense"


def test_events_that_move_no_money_are_ignored_and_unknown_types_are_refused() -> None:
    """Authorized/failed/... book nothing; an event type without a rule is never silently dropped."""
    fact = deposit(1)[0]
    assert post(Fact("payments", "PaymentAuthorized", "p", {}, fact.event_id, 1)) == Ignored(
        "PaymentAuthorized"
    )
    refused = post(Fact("payments", "ChargebackReversed", "p", {}, fact.event_id, 1))
    assert isinstance(refused, Rejected)
    assert refused.reason is RejectReason.BAD_EVENT


def test_business_date_is_the_day_in_the_business_time_zone() -> None:
    """23:30 UTC on Nov 30 is already Dec 1 in Kuala Lumpur."""
    captured = deposit(1, at_ms=1_764_545_400_000)[0]  # 2025-11-30T23:30:00Z
    utc = post(captured)
    local = post(captured, PostingPolicy(ZoneInfo("Asia/Kuala_Lumpur")))
    assert isinstance(utc, JournalDraft)
    assert isinstance(local, JournalDraft)
    assert (utc.business_date, local.business_date) == (date(2025, 11, 30), date(2025, 12, 1))


def reason(result: RuleResult) -> RejectReason:
    assert isinstance(result, Rejected), result
    return result.reason


def test_a_credit_that_does_not_match_its_payment_is_refused_as_unbalanced() -> None:
    """Same currency, different amounts: the journal could not balance; nothing is booked."""
    credited = deposit(1, amount_minor=1000)[1]
    assert reason(post(with_body(credited, amount_minor=1001))) is RejectReason.UNBALANCED


def test_fx_credits_are_checked_against_the_rate() -> None:
    """Converted once at the given rate, to within one minor unit; no rate, or a wrong one, refuses."""
    credited = deposit(1, amount_minor=10_000, mt5_currency="USD", fx_rate="1.08505")[1]  # 10850.5
    assert isinstance(post(with_body(credited, amount_minor=10_850)), JournalDraft)  # rounded down
    assert isinstance(post(with_body(credited, amount_minor=10_851)), JournalDraft)  # rounded up
    assert reason(post(with_body(credited, amount_minor=10_852))) is RejectReason.FX_MISMATCH
    assert reason(post(with_body(credited, amount_minor=10_849))) is RejectReason.FX_MISMATCH
    assert reason(post(with_body(credited, fx_rate=None))) is RejectReason.FX_MISMATCH
    assert reason(post(with_body(credited, fx_rate="1e3"))) is RejectReason.FX_MISMATCH
    same = deposit(2)[1]
    assert reason(post(with_body(same, fx_rate="1.0"))) is RejectReason.FX_MISMATCH


def test_unknown_or_disabled_currencies_and_bad_amounts_are_refused() -> None:
    """Unknown ISO code, lower case, a currency the ledger does not enable, zero or negative amounts."""
    captured = deposit(1)[0]
    assert reason(post(with_body(captured, currency="ZZZ"))) is RejectReason.BAD_EVENT
    assert reason(post(with_body(captured, currency="eur"))) is RejectReason.BAD_EVENT
    only_usd = PostingPolicy(allowed_currencies=frozenset({"USD"}))
    assert reason(post(captured, only_usd)) is RejectReason.BAD_EVENT
    assert reason(post(with_body(captured, amount_minor=0))) is RejectReason.BAD_EVENT
    assert reason(post(with_body(captured, amount_minor=-5))) is RejectReason.BAD_EVENT
    assert reason(post(with_body(captured, operation_id=" "))) is RejectReason.BAD_EVENT


def test_an_unknown_debit_reason_is_refused() -> None:
    """Mt5Debited.debit_reason is a closed set the schema cannot enforce; unknown values are refused."""
    debit = deposit(1, ending="refunded")[3]
    assert reason(post(with_body(debit, debit_reason="goodwill"))) is RejectReason.UNKNOWN_DEBIT_REASON


def test_entries_say_debit_and_credit_with_positive_amounts_only() -> None:
    """Every rule's journal: positive amounts, both directions present."""
    for n, fact in enumerate(deposit(1, ending="refunded") + deposit(2, mt5_currency="USD", fx_rate="1.1")):
        result = post(fact)
        assert isinstance(result, JournalDraft), (n, result)
        assert {e.direction for e in result.entries} == {Direction.DEBIT, Direction.CREDIT}
        assert all(e.amount_minor > 0 for e in result.entries)
        assert all(isinstance(e.account, AccountKey) for e in result.entries)


def test_an_fx_deposit_refunded_in_full_leaves_nothing_pending_in_either_currency() -> None:
    """Mt5Debited v2 carries the payment side: a EUR deposit credited in USD and refunded books the
    debit through fx_clearing, so client_deposits_pending nets to zero in EUR and in USD. A v1 event
    (no payment side) still books the account currency only."""
    facts = deposit(7, currency="EUR", mt5_currency="USD", fx_rate="1.1", ending="refunded")
    debit_fact = facts[-1]
    v2 = with_body(debit_fact, payment_amount_minor=10_000, payment_currency="EUR", fx_rate="1.1")
    pending: dict[str, int] = {}
    for fact in [*facts[:-1], v2]:
        result = post(fact)
        assert isinstance(result, JournalDraft), result
        for e in result.entries:
            if e.account.code == "client_deposits_pending":
                sign = 1 if e.direction is Direction.CREDIT else -1
                pending[e.account.currency] = pending.get(e.account.currency, 0) + sign * e.amount_minor
    assert all(v == 0 for v in pending.values()), pending
    v1 = post(debit_fact)
    assert isinstance(v1, JournalDraft) and {e.account.currency for e in v1.entries} == {"USD"}
