"""Stripe's balance transactions by payout, normalized into the settlement CSV (``domain.stripe_settlement``).

The payloads are Stripe's documented example objects (``reconciler.testing.stripe``), with the
fields our adapter sets (metadata) and the ones each case needs changed. stripe-mock cannot give
these (it is stateless and its fixtures carry no metadata of ours): the contract test proves the
requests and shapes, these prove the mapping.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from backbone.psp import stripe_objects
from reconciler.domain import stripe_settlement
from reconciler.domain.reports import parse_report
from reconciler.domain.stripe_settlement import NotNormalized, PaidOut, settlement_csv
from reconciler.testing.stripe import (
    DAY,
    PAYOUT_ID,
    WINDOW,
    charge,
    day_of_transactions,
    dispute,
    payout,
    refund,
    txn,
)


def good() -> list[PaidOut]:
    return [PaidOut(payout(amount=6_710), day_of_transactions())]


def without_own() -> list[dict[str, Any]]:
    """The day's transactions without the payout's own one (Stripe's list may leave it out: the
    check is the sum of the others), so that a test can add one and change the payout's amount."""
    return [t for t in day_of_transactions() if t["type"] != "payout"]


def refused(paid_out: list[PaidOut]) -> str:
    found = settlement_csv(DAY, WINDOW, paid_out)
    assert isinstance(found, NotNormalized), found
    return found.reason


def test_a_payout_becomes_rows_in_the_simulators_columns() -> None:
    """A charge, a refund and a dispute adjustment become charge, refund and dispute rows with the
    ids the matching joins on (the intent for a charge, the refund, the dispute), our references from
    the metadata our adapter writes, Stripe's amounts as they are, the payout as their batch; the
    payout's own transaction is no row."""
    data = settlement_csv(DAY, WINDOW, good())
    assert isinstance(data, bytes)
    assert data.decode().splitlines() == [
        "business_date,balance_transaction_id,type,payment_intent_id,source_id,reference,"
        "source_reference,currency,gross_minor,fee_minor,net_minor,payout_batch_id,created_at",
        f"2026-11-30,txn_charge,charge,pi_3MmlLrLkdIwHu7ix0qlCyHBo,ch_3MmlLrLkdIwHu7ix0snN0B15,pay_1,,USD,"
        f"10000,320,9680,{PAYOUT_ID},2026-11-30T01:00:00Z",
        f"2026-11-30,txn_refund,refund,pi_3MmlLrLkdIwHu7ix0qlCyHBo,re_1Nispe2eZvKYlo2Cd31jOCgZ,,op_refund_1,"
        f"USD,-1000,-30,-970,{PAYOUT_ID},2026-11-30T01:01:00Z",
        f"2026-11-30,txn_dispute,dispute,pi_3MmlLrLkdIwHu7ix0qlCyHBo,du_1MtJUT2eZvKYlo2CNaw2HvEv,,,USD,"
        f"-500,1500,-2000,{PAYOUT_ID},2026-11-30T01:02:00Z",
    ]


def test_the_normalized_bytes_pass_the_strict_parser_unchanged() -> None:
    """What the normalization writes is what ``parse_report`` accepts, value for value: the
    negative refund fee included (the parser's refund rule), with stable keys under provider stripe."""
    data = settlement_csv(DAY, WINDOW, good())
    assert isinstance(data, bytes)
    report = parse_report("stripe", "settlement", DAY, data)
    got = [
        (r.source_key, r.type, r.gross_minor, r.fee_minor, r.net_minor, r.payout_batch_id)
        for r in report.settlement
    ]
    assert got == [
        ("stripe|settlement|txn_charge", "charge", 10_000, 320, 9_680, PAYOUT_ID),
        ("stripe|settlement|txn_refund", "refund", -1_000, -30, -970, PAYOUT_ID),
        ("stripe|settlement|txn_dispute", "dispute", -500, 1_500, -2_000, PAYOUT_ID),
    ]
    assert (
        report.settlement[0].reference == "pay_1" and report.settlement[1].source_reference == "op_refund_1"
    )


def test_the_same_stripe_state_gives_the_same_bytes_in_any_order() -> None:
    """Stripe lists newest first and may page differently: rows are sorted by (created, id), so the
    same transactions give the same bytes (the import then recognises them by digest)."""
    shuffled = [PaidOut(payout(amount=6_710), list(reversed(day_of_transactions())))]
    assert settlement_csv(DAY, WINDOW, shuffled) == settlement_csv(DAY, WINDOW, good())


def test_only_the_dates_transactions_become_rows_but_the_whole_payout_is_checked() -> None:
    """A payout also carrying a charge of the day before: that charge is no row of this date, yet
    it counts in the payout's sum (the payout must be whole); without it the sum check refuses."""
    earlier = txn("txn_before", "charge", 2_000, 60, charge(id="ch_before"), WINDOW[0] // 1000 - 60)
    whole = [PaidOut(payout(amount=6_710 + 1_940), [*without_own(), earlier])]
    data = settlement_csv(DAY, WINDOW, whole)
    assert isinstance(data, bytes) and b"txn_before" not in data and b"txn_charge" in data
    assert "sum to 6710, the payout is 9650" in refused([PaidOut(payout(amount=9_650), without_own())])


@pytest.mark.parametrize(
    ("kind", "source", "expected"),
    [
        ("transfer", "tr_1MiN3gLkdIwHu7ixNiSPBUJ0", "type 'transfer' is not one the reconciler understands"),
        ("stripe_fee", "fee_x", "type 'stripe_fee' is not one the reconciler understands"),
        ("payout_failure", "po_failed", "payout_failure of po_failed: a payout of our Stripe balance"),
        ("adjustment", {"id": "ch_x", "object": "charge"}, "whose source is a 'charge', not a dispute"),
    ],
)
def test_a_transaction_it_does_not_understand_refuses_the_whole_file(
    kind: str, source: Any, expected: str
) -> None:
    """Stripe's documented transfer, a Stripe fee, a failed payout coming back to the balance (never
    read as our payout_return, a customer's withdrawal) and an adjustment that is no dispute: each
    refuses the whole file with its reason, naming the transaction; nothing is dropped."""
    odd = txn("txn_odd", kind, 1_000, 0, source)
    reason = refused([PaidOut(payout(amount=6_710 + 1_000), [*without_own(), odd])])
    assert expected in reason and "txn_odd" in reason


def test_a_dispute_won_back_is_refused() -> None:
    """A dispute adjustment that brings money in (funds reinstated) has no row type: refused."""
    won = txn("txn_won", "adjustment", 500, 0, dispute())
    reason = refused([PaidOut(payout(amount=6_710 + 500), [*without_own(), won])])
    assert "brings money back" in reason


@pytest.mark.parametrize(
    ("which", "replacement", "expected"),
    [
        (0, charge(metadata={}), "the charge ch_3MmlLrLkdIwHu7ix0snN0B15 has no metadata.reference"),
        (
            1,
            refund(metadata={"reference": ""}),
            "the refund re_1Nispe2eZvKYlo2Cd31jOCgZ has no metadata.reference",
        ),
        (0, charge(payment_intent=None), "the charge has no payment intent"),
        (0, "ch_3MmlLrLkdIwHu7ix0snN0B15", "source is not expanded"),
        (1, {"id": "re_x", "object": "application_fee"}, "whose source is a 'application_fee', not a refund"),
    ],
)
def test_a_payment_not_of_ours_or_unexpanded_is_refused_with_reason(
    which: int, replacement: Any, expected: str
) -> None:
    """Missing metadata (a payment our adapter did not create), a charge without a payment intent,
    a source left unexpanded or of the wrong object: refused, saying which and why."""
    transactions = day_of_transactions()
    transactions[which] = {**transactions[which], "source": replacement}
    assert expected in refused([PaidOut(payout(amount=6_710), transactions)])


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"automatic": False, "metadata": {"reference": "wd_1"}},
            "is a manual payout (metadata reference 'wd_1')",
        ),
        ({"status": "failed"}, "is 'failed': a payout of our Stripe balance to our bank failed"),
        ({"status": "canceled"}, "is 'canceled'"),
        ({"reconciliation_status": "in_progress"}, "Stripe has not finished assigning its transactions"),
        ({"currency": "xyz"}, "currency 'xyz' is not one we know"),
    ],
)
def test_a_payout_that_is_no_settled_batch_is_refused(changes: dict[str, Any], expected: str) -> None:
    """A manual payout (a withdrawal through Stripe, ADR 0010), a failed or canceled one, one whose
    transactions Stripe has not finished assigning, an unknown currency: refused with the reason."""
    assert expected in refused([PaidOut(payout(amount=6_710, **changes), day_of_transactions())])


def test_broken_arithmetic_and_a_transaction_in_two_payouts_are_refused() -> None:
    """net != amount - fee, another currency than the payout's, the payout transaction of another
    payout, the payout's own transaction of another amount than the payout, and one transaction
    listed under two payouts: refused."""
    bad_net = day_of_transactions()
    bad_net[0] = {**bad_net[0], "net": 9_681}
    assert "net 9681 is not amount - fee (9680)" in refused([PaidOut(payout(amount=6_710), bad_net)])
    other_currency = day_of_transactions()
    other_currency[0] = {**other_currency[0], "currency": "eur"}
    assert "is not the payout's USD" in refused([PaidOut(payout(amount=6_710), other_currency)])
    foreign = day_of_transactions()
    foreign[3] = {**foreign[3], "source": "po_other"}
    assert "a payout transaction of another payout (po_other)" in refused(
        [PaidOut(payout(amount=6_710), foreign)]
    )
    own = day_of_transactions()
    own[3] = txn("txn_payout", "payout", -6_000, 0, payout())
    assert "the payout's own transaction is -6000, the payout 6710" in refused(
        [PaidOut(payout(amount=6_710), own)]
    )
    twice = [
        PaidOut(payout(amount=6_710), day_of_transactions()),
        PaidOut(payout(id="po_2", amount=6_710), day_of_transactions()),
    ]
    assert "txn_charge is listed under two payouts" in refused(twice)


def test_an_empty_date_is_a_header_only_file() -> None:
    """No payout in the horizon: a valid, empty settlement file (the run then finds every fact of the
    date unsettled once past the grace period), not an error."""
    data = settlement_csv(DAY, WINDOW, [])
    assert isinstance(data, bytes) and parse_report("stripe", "settlement", DAY, data).settlement == ()


def test_the_metadata_key_is_the_one_our_stripe_adapter_writes() -> None:
    """The domain cannot import the adapter's constant: the two must stay the same word."""
    assert stripe_settlement.REFERENCE_KEY == stripe_objects.REFERENCE_KEY


def test_inputs_are_not_mutated() -> None:
    """Normalizing reads Stripe's documents only."""
    items = good()
    before = copy.deepcopy(items)
    settlement_csv(DAY, WINDOW, items)
    assert items == before
