"""The two pairings of money facts with MT5 operations, every case class and count of each, with
their exact keys, summaries and evidence: a captured deposit with its MT5 credit (keyed by the
payment), a refund or chargeback with the MT5 debit that took it back (keyed by the fact itself).
Both layers pair the same way (the first candidate by row, the amount compared only when the
operation names one, the grace period for an unmatched fact): what one finds, the other does."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler.application.runs import RunResult
from reconciler.testing.world import DAY, World, at

pytestmark = pytest.mark.integration

CLASSES = {"not_credited", "credit_amount_mismatch", "not_debited", "debit_amount_mismatch"}


def _credit(world: World, n: int, credit_id: int, amount: int, currency: str) -> None:
    """A deposit's MT5 credit that pays ``amount`` ``currency`` (no deal, no journal)."""
    world.deliver(
        "Mt5Credited",
        f"pay-{n}",
        {
            "credit_id": credit_id,
            "deposit_reference": f"dr-{n}",
            "mt5_login": 7001,
            "amount_minor": amount,
            "currency": currency,
            "deal_ticket": credit_id,
            "provider": "simpsp",
            "provider_payment_id": f"pi_{n}",
            "payment_amount_minor": amount,
            "payment_currency": currency,
            "fx_rate": None,
        },
        at(DAY, 11) + n,
    )


def _debit(world: World, made: dict[str, Any], debit_id: int, cause: str, amount: int | None) -> None:
    """An MT5 debit taking back ``cause`` (refund:<id> | chargeback:<id>) of the deposit ``made``,
    naming the payment amount it takes back (``None``: it names none)."""
    reason, reference = cause.split(":")
    world.deliver(
        "Mt5Debited",
        str(made["payment_id"]),
        {
            "debit_id": debit_id,
            "mt5_login": 7001,
            "amount_minor": amount or 1,
            "currency": "USD",
            "deal_ticket": debit_id,
            "debit_reason": reason,
            "source_reference": reference,
            "original_credit_id": made["credit_id"],
            "payment_amount_minor": amount,
            "payment_currency": "USD" if amount is not None else None,
            "fx_rate": None,
        },
        at(DAY, 12) + debit_id % 1000,
    )


def _chargeback(world: World, made: dict[str, Any], k: int, amount: int) -> None:
    world.deliver(
        "ChargebackReceived",
        str(made["payment_id"]),
        {
            "merchant_id": world.merchant,
            "chargeback_id": f"cb-{k}",
            "provider": "simpsp",
            "provider_dispute_id": f"dp_{k}",
            "amount_minor": amount,
            "currency": "USD",
            "deposit_reference": f"dr-{str(made['payment_id']).removeprefix('pay-')}",
            "reason": None,
        },
        at(DAY, 13) + k,
    )


def _found(result: RunResult) -> dict[str, tuple[str, list[str]]]:
    """The findings of the two layers: case key -> (summary, the evidence's records)."""
    return {
        f.case_key: (f.summary, sorted(f.evidence)) for f in result.findings if f.case_class.value in CLASSES
    }


def test_every_case_of_the_credit_and_takeback_pairings(world: World) -> None:
    """Captures: credited (twice: the first credit by row is the pair, the other leaves the capture
    alone), never credited, credited another amount, credited in another currency. Takebacks: a
    refund debited, one debited another amount, one by a debit naming no amount (not compared), a
    chargeback never debited, and a refund late in the day not debited yet: in flight before the
    grace period ends, not_debited after."""
    made = [world.deposit(i) for i in range(1, 4)]
    _credit(world, 1, 20_001, 1, "USD")  # a second credit of pay-1: not its pair
    world.deposit(4, credited=False)
    world.deposit(5, credited=False)
    world.deposit(6, credited=False)
    _credit(world, 5, 20_005, 49_000, "USD")
    _credit(world, 6, 20_006, 50_000, "EUR")
    world.refund(made[0], 1, 10_000)
    world.refund(made[1], 2, 7_000, debit_amount=6_000)
    world.refund(made[2], 3, 3_000, debited=False)
    _debit(world, made[2], 30_003, "refund:rf-3", None)
    _chargeback(world, made[0], 1, 2_000)
    late = world.deposit(7, at_ms=at(DAY, 23, 0))
    world.refund(late, 7, 500, debited=False)  # at 23:01
    world.publish_reports()

    early = world.run(as_of_ms=at(DAY, 23, 59))
    assert (early.counts["captures_credited"], early.counts["credits_in_flight"]) == (6, 0)
    assert (early.counts["takebacks_debited"], early.counts["debits_in_flight"]) == (3, 1)
    assert (early.counts["not_debited"], early.counts["debit_amount_mismatch"]) == (1, 1)
    assert (early.counts["not_credited"], early.counts["credit_amount_mismatch"]) == (1, 2)
    fact, side_by_side = ["fact"], ["credit", "fact"]
    expected = {
        "not_credited:capture:op-4": ("captured deposit dr-4 (50000 USD) has no MT5 credit", fact),
        "credit_amount_mismatch:capture:op-5": (
            "mt5-credit:20005 pays 49000 USD of a capture of 50000 USD",
            side_by_side,
        ),
        "credit_amount_mismatch:capture:op-6": (
            "mt5-credit:20006 pays 50000 EUR of a capture of 50000 USD",
            side_by_side,
        ),
        "debit_amount_mismatch:refund:rf-2": (
            "mt5-debit:30002 takes back 6000 USD of refund:rf-2 (7000 USD)",
            ["debit", "fact"],
        ),
        "not_debited:chargeback:cb-1": (
            "chargeback chargeback:cb-1 of deposit dr-1 (2000 USD) was never taken back from MT5",
            fact,
        ),
    }
    assert _found(early) == expected
    credit = next(f for f in early.findings if f.case_key == "credit_amount_mismatch:capture:op-5")
    assert credit.evidence["credit"]["source_key"] == "mt5-credit:20005"
    assert credit.evidence["fact"]["source_key"] == "capture:op-5"
    assert not {"id", "run_id", "import_id", "line_no"} & credit.evidence["fact"].keys()

    late_run = world.run()
    assert late_run.counts["debits_in_flight"] == 0
    assert _found(late_run) == expected | {
        "not_debited:refund:rf-7": (
            "refund refund:rf-7 of deposit dr-7 (500 USD) was never taken back from MT5",
            fact,
        )
    }
