"""Settlement report and bank file, pure: batching, sums, reproducibility, discrepancies."""

from __future__ import annotations

import csv
import datetime as dt
import io

from psp_sim.domain import reports as r

DAY = dt.date(2026, 3, 14)
PARAMS = r.ReportParams(DAY, "seed-1", batch_size_max=2, payout_delay_days=2)


def _txn(
    n: int, currency: str = "EUR", gross: int = 1000, fee: int = 59, kind: str = "charge"
) -> r.BalanceTxn:
    return r.BalanceTxn(
        f"txn_{n}",
        kind,
        f"ch_{n}",
        f"pi_{n}",
        f"pay_{n}",
        None,
        currency,
        gross,
        fee,
        gross - fee,
        1_773_446_400 + n,
    )  # type: ignore[arg-type]


TXNS = [_txn(1), _txn(2, "USD"), _txn(3), _txn(4, gross=-300, fee=0, kind="refund"), _txn(5)]


def test_batches_per_currency_in_order_of_at_most_n_rows() -> None:
    """EUR rows 1,3 | 4,5 and USD row 2: three batches, ids carry date, currency and index."""
    rows = r.batch_rows(TXNS, PARAMS)
    batches = [(row.txn.id, row.payout_batch_id.split("_")[1:4]) for row in rows]
    assert batches == [
        ("txn_1", ["20260314", "EUR", "001"]),
        ("txn_3", ["20260314", "EUR", "001"]),
        ("txn_4", ["20260314", "EUR", "002"]),
        ("txn_5", ["20260314", "EUR", "002"]),
        ("txn_2", ["20260314", "USD", "001"]),
    ]


def test_deposits_are_the_sum_of_nets_per_batch() -> None:
    """Batch 2 of EUR holds a refund (-300) and a charge (941): the deposit is 641."""
    found = r.deposits(r.batch_rows(TXNS, PARAMS))
    assert [(d.currency, d.amount_minor, d.item_count) for d in found] == [
        ("EUR", 1882, 2),
        ("EUR", 641, 2),
        ("USD", 941, 1),
    ]
    bank = list(csv.DictReader(io.StringIO(r.bank_csv(found, PARAMS))))
    assert [b["value_date"] for b in bank] == ["2026-03-16"] * 3
    assert [int(b["amount_minor"]) for b in bank] == [1882, 641, 941]


def test_same_seed_same_bytes_other_seed_other_batch_ids() -> None:
    """Reproducible: the CSV is a function of the rows and the seed."""
    text = r.settlement_csv(r.batch_rows(TXNS, PARAMS), PARAMS)
    assert text == r.settlement_csv(r.batch_rows(TXNS, PARAMS), PARAMS)
    other = r.ReportParams(DAY, "seed-2", 2, 2)
    assert r.settlement_csv(r.batch_rows(TXNS, other), other) != text
    assert text.splitlines()[0].split(",") == list(r.SETTLEMENT_COLUMNS)


def test_discrepancies() -> None:
    """missing_row by reference, wrong_amount by seeded pick (stable), extra_row added to a batch."""
    rows = r.batch_rows(TXNS, PARAMS)
    missing = r.apply_discrepancies(rows, [r.Discrepancy(1, "missing_row", "pay_3", 0, None)], PARAMS)
    assert [x.txn.id for x in missing] == ["txn_1", "txn_4", "txn_5", "txn_2"]
    wrong = [r.Discrepancy(2, "wrong_amount", None, 5, None)]
    once, twice = r.apply_discrepancies(rows, wrong, PARAMS), r.apply_discrepancies(rows, wrong, PARAMS)
    assert once == twice
    changed = [(a.txn.gross_minor, b.txn.gross_minor) for a, b in zip(rows, once, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1] - changed[0][0] == 5
    extra = r.apply_discrepancies(rows, [r.Discrepancy(3, "extra_row", "ghost", 777, "USD")], PARAMS)
    ghost = extra[-1]
    assert (ghost.txn.reference, ghost.txn.gross_minor, ghost.txn.currency) == ("ghost", 777, "USD")
    assert ghost.payout_batch_id == rows[-1].payout_batch_id
    unknown = r.apply_discrepancies(rows, [r.Discrepancy(4, "missing_row", "nobody", 0, None)], PARAMS)
    assert unknown == rows


def test_batch_id_parsing() -> None:
    """A batch id gives back its date, currency and index; anything else is None."""
    batch = r.payout_batch_id(PARAMS, "EUR", 3)
    assert r.parse_batch_id(batch) == (DAY, "EUR", 3)
    assert r.parse_batch_id("po_2026_EUR") is None and r.parse_batch_id("po_20261399_EUR_001_ab") is None
