"""The settlement report and the bank-deposit file from real payments: consistent (per payout batch the
nets sum to the deposit), reproducible for a seed, and tampered on request (missing, wrong, extra rows)."""

from __future__ import annotations

import csv
import io
from collections import defaultdict

from backbone.ids import new_id
from backbone.psp import Applied, PaymentIntent
from psp_sim.testing import SimProcess


def _captured(psp: SimProcess, amount_minor: int, currency: str) -> PaymentIntent:
    with psp.client() as client:
        created = client.create_intent(
            new_id("op"),
            amount_minor=amount_minor,
            currency=currency,
            reference=new_id("pay"),
            payment_method="pm_card_visa",
            confirm=True,
        )
        assert isinstance(created, Applied)
        captured = client.capture_intent(new_id("op"), created.value.id)
    assert isinstance(captured, Applied)
    return captured.value


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _business_date(psp: SimProcess, intent: PaymentIntent) -> str:
    txns = psp.ok("GET", f"/control/balance-transactions?payment_intent={intent.id}")["data"]
    return str(txns[0]["business_date"])


def _activity(psp: SimProcess) -> tuple[str, list[PaymentIntent]]:
    """Five charges in two currencies, two refunds, one dispute."""
    intents = [
        _captured(psp, amount, currency)
        for amount, currency in ((10_000, "EUR"), (2_345, "EUR"), (99, "EUR"), (5_000, "USD"), (1_234, "EUR"))
    ]
    with psp.client() as client:
        assert isinstance(client.create_refund(new_id("op"), intents[0].id, amount_minor=2_500), Applied)
        assert isinstance(client.create_refund(new_id("op"), intents[3].id, reference=new_id("rf")), Applied)
    psp.ok("POST", f"/control/payment_intents/{intents[1].id}/dispute", {})
    return _business_date(psp, intents[0]), intents


def test_settlement_and_bank_file_agree_per_batch_and_fees_are_as_documented(psp: SimProcess) -> None:
    """Every money movement is one row; per payout batch the nets sum to the bank deposit; fee =
    round_half_up(2.9 %) + 30, refunds carry none, a dispute costs 1500; net = gross - fee."""
    day, intents = _activity(psp)
    report = _rows(psp.ok("GET", f"/control/reports/settlement?date={day}"))
    bank = _rows(psp.ok("GET", f"/control/reports/bank-deposits?date={day}"))
    assert sorted(r["type"] for r in report) == ["charge"] * 5 + ["dispute"] + ["refund"] * 2
    nets: dict[str, int] = defaultdict(int)
    for row in report:
        assert int(row["net_minor"]) == int(row["gross_minor"]) - int(row["fee_minor"])
        nets[row["payout_batch_id"]] += int(row["net_minor"])
    assert {d["payout_batch_id"]: int(d["amount_minor"]) for d in bank} == nets
    fees = {(r["payment_intent_id"], r["type"]): int(r["fee_minor"]) for r in report}
    assert fees[(intents[0].id, "charge")] == 290 + 30  # 10 000 * 2.9 % = 290
    assert fees[(intents[1].id, "charge")] == 68 + 30  # 2 345 * 2.9 % = 68.005 -> 68
    assert fees[(intents[2].id, "charge")] == 3 + 30  # 99 * 2.9 % = 2.871 -> 3
    assert fees[(intents[0].id, "refund")] == 0 and fees[(intents[1].id, "dispute")] == 1500
    assert {r["reference"] for r in report} == {i.reference for i in intents}
    assert {d["currency"] for d in bank} == {"EUR", "USD"}


def test_reports_are_reproducible_for_a_seed(psp: SimProcess) -> None:
    """Same data + same seed = the same bytes; another seed changes batch ids, never amounts; a
    single batch can be fetched by its id."""
    day, _ = _activity(psp)
    first = psp.ok("GET", f"/control/reports/settlement?date={day}")
    assert psp.ok("GET", f"/control/reports/settlement?date={day}") == first
    other = psp.ok("GET", f"/control/reports/settlement?date={day}&seed=other")
    assert other != first
    strip = [{k: v for k, v in r.items() if k != "payout_batch_id"} for r in _rows(first)]
    assert [{k: v for k, v in r.items() if k != "payout_batch_id"} for r in _rows(other)] == strip
    deposit = _rows(psp.ok("GET", f"/control/reports/bank-deposits?date={day}"))[0]
    single = _rows(psp.ok("GET", f"/control/reports/bank-deposits/{deposit['payout_batch_id']}"))
    assert single == [deposit]


def test_injected_discrepancies_change_the_report_not_the_bank(psp: SimProcess) -> None:
    """missing_row drops a row, wrong_amount shifts one, extra_row adds an item we never had; the bank
    file keeps the real money, so the tampered batches no longer sum to their deposits."""
    day, intents = _activity(psp)
    honest = _rows(psp.ok("GET", f"/control/reports/settlement?date={day}"))
    bank_before = psp.ok("GET", f"/control/reports/bank-deposits?date={day}")
    psp.ok(
        "POST",
        "/control/reports/discrepancies",
        {"business_date": day, "kind": "missing_row", "reference": intents[2].reference},
    )
    psp.ok(
        "POST",
        "/control/reports/discrepancies",
        {
            "business_date": day,
            "kind": "wrong_amount",
            "reference": intents[4].reference,
            "amount_delta_minor": -7,
        },
    )
    psp.ok(
        "POST",
        "/control/reports/discrepancies",
        {"business_date": day, "kind": "extra_row", "currency": "EUR", "amount_delta_minor": 4200},
    )
    tampered = _rows(psp.ok("GET", f"/control/reports/settlement?date={day}"))
    assert psp.ok("GET", f"/control/reports/bank-deposits?date={day}") == bank_before
    assert intents[2].reference not in {r["reference"] for r in tampered}
    shifted = next(r for r in tampered if r["reference"] == intents[4].reference)
    original = next(r for r in honest if r["reference"] == intents[4].reference)
    assert int(shifted["gross_minor"]) == int(original["gross_minor"]) - 7
    extra = [r for r in tampered if r["reference"].startswith("ext_")]
    assert [(r["type"], r["gross_minor"]) for r in extra] == [("charge", "4200")]
    assert len(tampered) == len(honest)  # one missing, one extra
    psp.ok("DELETE", "/control/reports/discrepancies")
    assert _rows(psp.ok("GET", f"/control/reports/settlement?date={day}")) == honest


def test_discrepancy_without_a_reference_hits_a_seeded_row(psp: SimProcess) -> None:
    """A missing_row without reference drops a row chosen by the seed: the same row every time."""
    day, _ = _activity(psp)
    psp.ok("POST", "/control/reports/discrepancies", {"business_date": day, "kind": "missing_row"})
    first = psp.ok("GET", f"/control/reports/settlement?date={day}")
    assert psp.ok("GET", f"/control/reports/settlement?date={day}") == first
    assert len(_rows(first)) == 7
