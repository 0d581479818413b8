"""A case's merchant from the records it names (``domain.merchants``), for each record kind that
carries one, and the scope an operator sees cases through."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler.domain.merchants import (
    EVERY_MERCHANT,
    KnownMerchants,
    MerchantRefs,
    Scope,
    merchant_of,
    refs_of,
)

KNOWN = KnownMerchants(
    of_payment={"pay-1": frozenset({"m1"}), "wd_1": frozenset({"m2"}), "pay-3": frozenset({"m3"})},
    of_intent={("simpsp", "pi_1"): frozenset({"m1"})},
    payments_of_comment={"dep:7": frozenset({"pay-1"}), "wdr:8": frozenset({"wd_1"})},
)


def _settlement(kind: str, intent: str, reference: str) -> dict[str, Any]:
    return {
        "source_key": f"simpsp|settlement|txn_{kind}",
        "type": kind,
        "payment_intent_id": intent,
        "source_id": "src",
        "reference": reference,
        "source_reference": "",
        "gross_minor": 100,
    }


def _deal(comment: str) -> dict[str, Any]:
    return {"ticket": 1, "login": 7001, "comment": comment, "profit": "1.00"}


@pytest.mark.parametrize(
    ("kind", "evidence", "merchant"),
    [
        ("money fact (a payment's)", {"fact": {"merchant_id": "m1", "payment_id": "pay-x"}}, "m1"),
        ("money fact (a withdrawal's payout)", {"fact": {"merchant_id": "m2", "payment_id": "wd_9"}}, "m2"),
        (
            "settlement charge, by our payment id",
            {"settlement": _settlement("charge", "pi_x", "pay-1")},
            "m1",
        ),
        ("settlement charge, by the PSP's intent", {"settlement": _settlement("charge", "pi_1", "")}, "m1"),
        ("settlement refund, by the PSP's intent", {"settlement": _settlement("refund", "pi_1", "")}, "m1"),
        ("settlement payout, by our withdrawal id", {"settlement": _settlement("payout", "", "wd_1")}, "m2"),
        ("deposit's MT5 credit", {"credit": {"payment_id": "pay-1", "withdrawal_id": None}}, "m1"),
        ("withdrawal's MT5 debit", {"operation": {"payment_id": "wd_x", "withdrawal_id": "wd_1"}}, "m2"),
        ("journal", {"journal": {"payment_id": "pay-3", "reference": "capture:op-3"}}, "m3"),
        (
            "payment-state's attention",
            {"attention": {"source": "payment_state", "payment_id": "p", "facts": {"merchant_id": "m4"}}},
            "m4",
        ),
        (
            "mt5-credit's attention",
            {"attention": {"source": "mt5_credit", "payment_id": "pay-3", "facts": {}}},
            "m3",
        ),
        ("monitor alert", {"monitor": {"alert": "captured_not_credited"}, "payment_id": "pay-1"}, "m1"),
        ("deal with our deposit's comment", {"deal": _deal("dep:7")}, "m1"),
        ("deals of a withdrawal's comment", {"deals": [_deal("wdr:8"), _deal("wdr:8")]}, "m2"),
    ],
)
def test_each_record_kind_that_carries_a_merchant_gives_it(
    kind: str, evidence: dict[str, Any], merchant: str
) -> None:
    """Every record kind that names a merchant, itself or through our payment, withdrawal, the PSP's
    intent or our MT5 comment, makes the case that merchant's."""
    assert merchant_of(refs_of(evidence), KNOWN) == merchant, kind


@pytest.mark.parametrize(
    ("kind", "evidence"),
    [
        ("bank deposit", {"deposit": {"deposit_id": "dep-1", "payout_batch_id": "po_1"}}),
        ("payout batch", {"batch": {"payout_batch_id": "po_1", "net_minor": 10}}),
        ("deal without our reference", {"deal": _deal("manual top-up")}),
        ("deal whose comment only looks like ours", {"deal": _deal("dep:7x")}),
        ("settlement row we know nothing of", {"settlement": _settlement("charge", "pi_9", "pay-9")}),
    ],
)
def test_records_that_name_no_known_merchant_give_none(kind: str, evidence: dict[str, Any]) -> None:
    """A bank deposit, a payout batch, a deal without our reference and ids none of our records
    know: the case names no merchant."""
    assert merchant_of(refs_of(evidence), KNOWN) is None, kind


def test_an_intent_is_looked_up_at_the_rows_provider() -> None:
    """The same PSP payment id at another provider is another payment: it gives no merchant."""
    stripe_only = KnownMerchants(of_intent={("stripe", "pi_1"): frozenset({"m1"})})
    assert merchant_of(refs_of({"settlement": _settlement("charge", "pi_1", "")}), stripe_only) is None


def test_records_that_disagree_name_no_merchant() -> None:
    """A case whose records name two merchants is nobody's alone: it names no merchant (only an
    operator of every merchant sees it), never the first one found."""
    evidence = {"settlement": _settlement("charge", "pi_1", "pay-3"), "fact": {"merchant_id": "m1"}}
    assert merchant_of(refs_of(evidence), KNOWN) is None
    agreeing = {"settlement": _settlement("charge", "pi_1", "pay-1"), "fact": {"merchant_id": "m1"}}
    assert merchant_of(refs_of(agreeing), KNOWN) == "m1"


def test_refs_name_what_must_be_looked_up() -> None:
    """refs_of collects the merchants named outright and the ids to look up (payments, intents at
    the row's provider, our comments), and refs of several cases unite into one lookup."""
    deal = refs_of({"operation": {"payment_id": "pay-1", "withdrawal_id": None}, "deals": [_deal("dep:7")]})
    row = refs_of({"settlement": _settlement("dispute", "pi_1", "")})
    assert deal == MerchantRefs(payments=frozenset({"pay-1"}), comments=frozenset({"dep:7"}))
    assert row == MerchantRefs(intents=frozenset({("simpsp", "pi_1")}))
    assert MerchantRefs.union([deal, row]) == MerchantRefs(
        payments=frozenset({"pay-1"}), intents=frozenset({("simpsp", "pi_1")}), comments=frozenset({"dep:7"})
    )
    assert refs_of({}) == MerchantRefs()


def test_a_scope_sees_its_merchants_and_every_merchant_sees_all() -> None:
    """An operator of named merchants sees their cases only, never a case of no merchant; an
    operator of every merchant sees every case, those of no merchant included."""
    mine = Scope(frozenset({"m1"}))
    assert mine.sees("m1") and not mine.sees("m2") and not mine.sees(None)
    assert not Scope(frozenset()).sees("m1")
    assert EVERY_MERCHANT.sees("m2") and EVERY_MERCHANT.sees(None)
