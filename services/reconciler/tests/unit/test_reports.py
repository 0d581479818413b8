"""The settlement report and bank file are taken whole or not at all: every bad input is refused
with its line and reason, and a good file parses to stable source keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest
from reconciler.domain.reports import ReportRefused, parse_report
from reconciler.testing.sources import SettlementLine, bank_csv, settlement_csv
from reconciler.testing.world import DAY, at

LINE = SettlementLine("txn_1", "charge", "pi_1", "ch_1", "pay-1", "USD", 50_000, 700, "po_1", at(DAY, 10))


def _settlement(text: str) -> None:
    parse_report("simpsp", "settlement", DAY, text.encode())


def test_a_good_report_parses_with_stable_source_keys() -> None:
    """Rows keep their values; the key names provider, type and row id; the digest is of the bytes."""
    data = settlement_csv(DAY, [LINE])
    report = parse_report("simpsp", "settlement", DAY, data)
    [row] = report.settlement
    assert row.source_key == "simpsp|settlement|txn_1"
    assert (row.gross_minor, row.fee_minor, row.net_minor, row.line_no) == (50_000, 700, 49_300, 2)
    assert report.digest == parse_report("simpsp", "settlement", DAY, data).digest


@pytest.mark.parametrize(
    ("mutate", "line", "reason"),
    [
        (lambda t: t.replace("USD", "XYZ"), 2, "not a currency we know"),
        (lambda t: t.replace("USD", "usd"), 2, "not an ISO 4217 code"),
        (lambda t: t.replace(",50000,", ",-50000,"), 2, "a charge has a positive gross_minor"),
        (lambda t: t.replace(",50000,", ",50000.5,"), 2, "not an integer amount"),
        (lambda t: t.replace(",49300,", ",49301,"), 2, "net_minor 49301 is not gross_minor - fee_minor"),
        (lambda t: t.replace("2026-11-30,txn", "2026-11-29,txn"), 2, "is not the report's date"),
        (lambda t: t.replace(",charge,", ",transfer,"), 2, "type='transfer'"),
        (lambda t: t.replace(",charge,", ",payout,"), 2, "a payout has a negative gross_minor"),
        (lambda t: t.replace(",pi_1,", ",,"), 2, "payment_intent_id is empty"),
        (lambda t: t + t.splitlines()[1] + "\n", 3, "duplicate row 'txn_1'"),
        (lambda t: t.rstrip("\n"), 2, "truncated"),
        (lambda t: t.replace(",po_1,", ",po_1,extra,"), 2, "14 fields, expected 13"),
        (lambda t: t.replace("balance_transaction_id", "txn"), 1, "header must be"),
        (lambda t: t.replace(",700,", ",-1,").replace(",49300,", ",50001,"), 2, "fee_minor=-1 is negative"),
    ],
)
def test_bad_settlement_input_is_refused_with_line_and_reason(mutate, line: int, reason: str) -> None:  # type: ignore[no-untyped-def]
    """Unknown currency, impossible sign, broken arithmetic, wrong date, duplicate row, truncation,
    wrong shape: refused naming the line (the header is line 1)."""
    text = mutate(settlement_csv(DAY, [LINE]).decode())
    with pytest.raises(ReportRefused) as refused:
        _settlement(text)
    assert refused.value.line == line
    assert reason in refused.value.reason


def test_refund_and_dispute_rows_must_take_money_out() -> None:
    """A refund with a positive gross is refused; a negative one parses."""
    refund = SettlementLine("txn_2", "refund", "pi_1", "re_1", "pay-1", "USD", 1_000, 0, "po_1", at(DAY, 11))
    with pytest.raises(ReportRefused, match="a refund has a negative gross_minor"):
        parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [refund]))
    ok = SettlementLine("txn_2", "refund", "pi_1", "re_1", "pay-1", "USD", -1_000, 0, "po_1", at(DAY, 11))
    assert (
        parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [ok])).settlement[0].gross_minor
        == -1000
    )


PAYOUT = SettlementLine("txn_p", "payout", "", "po_1x", "wd_1", "USD", -3_000, 0, "po_1", at(DAY, 14))
RETURN = SettlementLine("txn_q", "payout_return", "", "po_1x", "wd_1", "USD", 3_000, 0, "po_1", at(DAY, 15))


def test_payout_rows_need_no_intent_and_their_own_sign() -> None:
    """A withdrawal's payout (gross < 0) and payout return (gross > 0) parse with an empty
    payment_intent_id; the other sign is refused naming the line; a charge without an intent stays
    refused (only these two types may have none)."""
    rows = parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [LINE, PAYOUT, RETURN])).settlement
    assert [(r.type, r.payment_intent_id, r.source_id, r.gross_minor) for r in rows[1:]] == [
        ("payout", "", "po_1x", -3_000),
        ("payout_return", "", "po_1x", 3_000),
    ]
    for wrong, reason in (
        (replace(PAYOUT, gross_minor=3_000), "a payout has a negative gross_minor, not 3000"),
        (replace(RETURN, gross_minor=-3_000), "a payout_return has a positive gross_minor, not -3000"),
        (replace(LINE, payment_intent_id=""), "payment_intent_id is empty"),
    ):
        with pytest.raises(ReportRefused) as refused:
            parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [PAYOUT, wrong]))
        assert (refused.value.line, refused.value.reason) == (3, reason)


def test_bank_file_parses_and_refuses_bad_rows() -> None:
    """The bank file: one row per payout batch; a zero item count or a value date before the
    business date is refused; not UTF-8 is refused."""
    data = bank_csv(DAY, [LINE])
    [row] = parse_report("simpsp", "bank_deposits", DAY, data).bank
    assert (row.payout_batch_id, row.amount_minor, row.item_count) == ("po_1", 49_300, 1)
    with pytest.raises(ReportRefused, match="item_count=0"):
        parse_report("simpsp", "bank_deposits", DAY, data.replace(b",1,SIMPSP", b",0,SIMPSP"))
    with pytest.raises(ReportRefused, match="before the business date"):
        parse_report("simpsp", "bank_deposits", DAY, data.replace(b"2026-12-02", b"2026-11-01"))
    with pytest.raises(ReportRefused, match="not UTF-8"):
        parse_report("simpsp", "bank_deposits", DAY, b"\xff\xfe")
    with pytest.raises(ReportRefused, match="empty file"):
        parse_report("simpsp", "bank_deposits", date(2026, 1, 1), b"")


def test_the_fast_path_builds_what_the_checked_parser_builds() -> None:
    """For a well-formed row (charge, refund, dispute, payout, payout return, a reference or none)
    the fast path gives exactly the row the checked parser gives; for a row it is unsure of it
    gives None and leaves the decision to the checked parser."""
    from reconciler.domain import reports as r  # noqa: PLC0415 - only this test

    rows = [
        LINE,
        SettlementLine(
            "txn_2", "refund", "pi_1", "re_1", "pay-1", "USD", -1_000, 0, "po_1", at(DAY, 11), "rf-1"
        ),
        SettlementLine("txn_3", "dispute", "pi_1", "dp_1", "", "EUR", -500, 1_500, "po_2", at(DAY, 12)),
        PAYOUT,
        RETURN,
    ]
    text = settlement_csv(DAY, rows).decode().splitlines()[1:]
    for n, line in enumerate(text, start=2):
        raw = line.split(",")
        fast = r._settlement_fast("simpsp", DAY.isoformat(), n, raw)
        checked = r._settlement_row("simpsp", DAY, n, dict(zip(r.SETTLEMENT_COLUMNS, raw, strict=True)))
        assert fast == checked
        assert r._settlement_fast("simpsp", DAY.isoformat(), n, [raw[0], f" {raw[1]}", *raw[2:]]) is None


def test_a_refund_may_give_a_fee_back_but_must_still_take_money_out() -> None:
    """A refund whose fee is negative (the PSP gives part of the charge's fee back, as Stripe's refund
    balance transactions do) parses with net = gross - fee; one that would give back more fee than
    it refunds (net >= 0) is refused."""
    refund = SettlementLine(
        "txn_2", "refund", "pi_1", "re_1", "pay-1", "USD", -1_000, -30, "po_1", at(DAY, 11)
    )
    [row] = parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [refund])).settlement
    assert (row.gross_minor, row.fee_minor, row.net_minor) == (-1_000, -30, -970)
    greedy = replace(refund, fee_minor=-1_000)
    with pytest.raises(ReportRefused, match="gives back a fee of 1000, more than it refunds"):
        parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [greedy]))


@pytest.mark.parametrize("row_type", ["charge", "dispute", "payout", "payout_return"])
def test_a_negative_fee_on_anything_but_a_refund_is_refused(row_type: str) -> None:
    """Only a refund may carry a negative fee: on a charge, a dispute or a withdrawal's rows it is
    refused naming the rule."""
    gross = 1_000 if row_type in ("charge", "payout_return") else -1_000
    line = SettlementLine("txn_3", row_type, "pi_1", "x_1", "pay-1", "USD", gross, -5, "po_1", at(DAY, 11))
    with pytest.raises(ReportRefused, match="only a refund may give a fee back"):
        parse_report("simpsp", "settlement", DAY, settlement_csv(DAY, [line]))
