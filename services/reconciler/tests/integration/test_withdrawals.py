"""Withdrawals in the daily run (ADR 0008) on real PostgreSQL: a clean day with a paid, a
failed-and-given-back and a returned-and-given-back withdrawal opens nothing; each payout
discrepancy is injected and found under its stable case key; a re-run gives the same cases."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest
from reconciler.adapters.matching import LAYERS
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.testing.sources import SettlementLine
from reconciler.testing.world import DAY, World, at

pytestmark = pytest.mark.integration


def _day(world: World, *, deposits: int = 2) -> list[dict[str, object]]:
    """Deposits, then one withdrawal of each ending (withdrawals 1 paid, 2 failed, 3 returned)."""
    for i in range(1, deposits + 1):
        world.deposit(i)
    return [world.withdrawal(k, ending=e) for k, e in enumerate(("paid", "failed", "returned"), start=1)]


def test_a_clean_day_with_withdrawals_gives_no_case(world: World) -> None:
    """Paid, failed and returned withdrawals whose facts, journals, deals and settlement rows all
    agree: the run is clean. The three payout rows (two payouts, one return) match their payout
    facts; the three wdr: debits and two wbk: give-back credits match their deals; no give-back
    credit is taken as a deposit's credit, and PayoutFailed left no record to match."""
    _day(world)
    world.publish_reports()
    result = world.run()
    assert result.status == "clean", (result.status, [f.case_key for f in result.findings])
    assert result.findings == []
    assert result.counts["settlement_rows_matched"] == 2 + 3
    assert result.counts["captures_credited"] == 2
    assert result.counts["operations_with_deal"] == 2 + 3 + 2
    with psycopg.connect(world.url) as conn:
        kinds = conn.execute("SELECT kind, count(*) FROM money_facts GROUP BY kind ORDER BY kind").fetchall()
        assert kinds == [("capture", 2), ("payout", 2), ("payout_return", 1)]
        comments = conn.execute(
            "SELECT left(comment, 3), count(*) FROM mt5_operations GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert comments == [("dep", 2), ("wbk", 2), ("wdr", 3)]
        credit_pairs = conn.execute(
            "SELECT count(*) FROM matches m JOIN mt5_operations o ON o.id = m.right_id"
            " WHERE m.run_id = %s AND m.layer = %s AND o.withdrawal_id IS NOT NULL",
            (result.run_id, LAYERS["capture_credit"]),
        ).fetchone()
        assert credit_pairs == (0,)
    assert world.store.cases_where(scope=EVERY_MERCHANT) == []


def test_payout_discrepancies_are_found_and_a_rerun_gives_the_same_cases(world: World) -> None:
    """One of each, found under its key: a payout the PSP did not settle (internal_only), a payout
    row we have no fact for (external_only), a payout return settled for another amount
    (amount_mismatch), a withdrawal the ledger did not book (missing_journal of its debit and its
    payout), a deal ``wdr:`` nobody's debit explains (deal_without_record) and two deals carrying one
    withdrawal debit's reference (two_deals_one_reference). The re-run, deals read again, finds
    exactly the same cases and opens none twice."""
    made = _day(world)
    world.withdrawal(4, settled=False)
    unbooked = world.withdrawal(5, journals=False)
    ghost = SettlementLine("txn_ghost", "payout", "", "po_ghost", "wd_x", "USD", -700, 0, "po_1", at(DAY, 15))
    world.settlement.append(ghost)
    returned_line = next(x for x in world.settlement if x.type == "payout_return")
    world.settlement[world.settlement.index(returned_line)] = replace(returned_line, gross_minor=19_900)
    t = at(DAY, 16)
    stray = world.deals.add(7001, "wdr:99999", "-12.00", t)
    world.deals.add(7001, f"wdr:{made[0]['debit_id']}", "-200.00", t)
    world.publish_reports()

    result = world.run()
    assert result.status == "discrepancies"
    wid3, wid4, wid5 = (f"wd_{k:032x}" for k in (3, 4, 5))
    expected = {
        f"internal_only:payout:{wid4}",
        "external_only:simpsp|settlement|txn_ghost",
        "amount_mismatch:simpsp|settlement|txn_wr3",
        f"missing_journal:payout:{wid5}",
        f"missing_journal:mt5-debit:{unbooked['debit_id']}",
        f"deal_without_record:deal:{stray.ticket}",
        f"two_deals_one_reference:wdr:{made[0]['debit_id']}",
    }
    assert {f.case_key for f in result.findings} == expected
    mismatch = next(f for f in result.findings if f.case_class.value == "amount_mismatch")
    assert f"payout-return:{wid3}" in mismatch.summary
    opened = [
        (c["id"], c["case_key"], c["status"], c["updated_at"])
        for c in world.store.cases_where(scope=EVERY_MERCHANT)
    ]
    assert {key for _, key, _, _ in opened} == expected

    again = world.run()
    assert {f.case_key for f in again.findings} == expected
    # same keys, same evidence: no case opened twice, none updated or resolved
    assert [
        (c["id"], c["case_key"], c["status"], c["updated_at"])
        for c in world.store.cases_where(scope=EVERY_MERCHANT)
    ] == opened


def test_a_give_back_credit_never_counts_as_a_deposits_credit(world: World) -> None:
    """A give-back credit keyed by the payment of a deposit that was never credited (its producer
    keyed it by the card's deposit): the capture still has no MT5 credit (not_credited), and the
    give-back itself opens no credit case (it expects no capture)."""
    made = world.deposit(1, credited=False)
    world.withdrawal(2, ending="failed", give_back_payment_id=str(made["payment_id"]))
    world.publish_reports()
    result = world.run()
    assert world.classes(result) == ["not_credited"]
    assert result.findings[0].case_key == "not_credited:capture:op-1"


def test_money_out_without_its_mt5_side_is_found(world: World) -> None:
    """A paid payout whose withdrawal has no MT5 debit (the money left our PSP balance and was never
    taken off MT5: payout_without_debit) and a returned payout never given back to MT5
    (return_not_given_back), past the grace period; the same two younger than the grace period are
    in flight (no case); a failed payout never given back is not this layer's (PayoutFailed is not
    kept: mt5-credit's own case)."""
    _day(world)
    world.withdrawal(4, debited=False)
    world.withdrawal(5, ending="returned", given_back=False)
    world.withdrawal(6, ending="failed", given_back=False)
    late = at(DAY, 23, 30)
    world.withdrawal(7, debited=False, at_ms=late)
    world.withdrawal(8, ending="returned", given_back=False, at_ms=late)
    world.publish_reports()
    result = world.run(as_of_ms=late + 30 * 60_000)  # withdrawals 7 and 8 are younger than an hour
    wid4, wid5 = (f"wd_{k:032x}" for k in (4, 5))
    assert {f.case_key for f in result.findings} == {
        f"payout_without_debit:payout:{wid4}",
        f"return_not_given_back:payout-return:{wid5}",
    }
    high = {c["case_class"]: c["severity"] for c in world.store.cases_where(scope=EVERY_MERCHANT)}
    assert high == {"payout_without_debit": "high", "return_not_given_back": "high"}
