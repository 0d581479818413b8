"""The daily run on real PostgreSQL: every discrepancy class injected and found, in both directions;
a clean day gives no case; re-runs are idempotent; the lock, the grace period, incomplete inputs,
and the case lifecycle (opened, fixed, resolved; resolved stays resolved; changed evidence reopens)."""

from __future__ import annotations

import threading
from dataclasses import replace

import psycopg
import pytest
from reconciler.application.ports import RunInProgress
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.testing.world import DAY, HOUR_MS, World, at

pytestmark = pytest.mark.integration


def _clean_day(world: World, n: int = 3) -> list[dict[str, object]]:
    made = [world.deposit(i) for i in range(1, n + 1)]
    world.publish_reports()
    return made


def test_a_clean_day_gives_no_case(world: World) -> None:
    """Captures, credits, deals, journals, settlement rows and bank deposits that all agree: the run
    is clean, opens nothing, and every record took part in exactly one match per layer."""
    _clean_day(world, 5)
    result = world.run()
    assert result.status == "clean", result
    assert result.findings == []
    assert result.counts["settlement_rows_matched"] == 5
    assert result.counts["captures_credited"] == 5
    assert result.counts["operations_with_deal"] == 5
    assert world.store.cases_where(scope=EVERY_MERCHANT) == []


def test_the_sealed_matches_keep_one_match_per_record_and_layer(world: World) -> None:
    """The run's sealed partition of ``matches`` holds each layer's pairs under its smallint code
    (migration 0006), and its unique constraints refuse a second match of a record in a layer, on
    either side, and a layer code that names no layer."""
    _clean_day(world, 3)
    result = world.run()
    assert result.status == "clean", result
    with psycopg.connect(world.url) as conn:
        layers = conn.execute(
            "SELECT layer, count(*) FROM matches WHERE run_id = %s GROUP BY layer ORDER BY layer",
            (result.run_id,),
        ).fetchall()
        assert layers == [(1, 3), (2, 3), (4, 3)]  # settlement_fact, capture_credit, operation_deal
        pair = conn.execute(
            "SELECT left_id, right_id FROM matches WHERE run_id = %s AND layer = 2 LIMIT 1", (result.run_id,)
        ).fetchone()
        assert pair is not None
        left, right = pair
        for again in ((left, right + 1000), (left + 1000, right)):
            with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
                conn.execute("INSERT INTO matches VALUES (%s, 2, %s, %s)", (result.run_id, *again))
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute("INSERT INTO matches VALUES (%s, 5, 1, 1)", (result.run_id,))


def test_lost_webhook_is_external_only_and_our_extra_fact_is_internal_only(world: World) -> None:
    """Both directions of layer 2: a settlement row with no money fact of ours (a lost webhook) and
    a money fact of ours the PSP did not settle."""
    _clean_day(world, 2)
    ghost = replace(
        world.settlement[0], txn_id="txn_ghost", payment_intent_id="pi_ghost", source_id="ch_ghost"
    )
    world.settlement.append(ghost)
    world.deposit(9, settled=False)
    world.publish_reports()
    result = world.run()
    assert result.status == "discrepancies"
    assert world.classes(result) == ["external_only", "internal_only"]
    keys = {f.case_key for f in result.findings}
    assert "external_only:simpsp|settlement|txn_ghost" in keys
    assert "internal_only:capture:op-9" in keys


def test_amount_and_currency_mismatches(world: World) -> None:
    """The PSP settled another amount than we booked, or in another currency."""
    _clean_day(world, 3)
    world.settlement[0] = replace(world.settlement[0], gross_minor=world.settlement[0].gross_minor + 100)
    world.settlement[1] = replace(world.settlement[1], currency="EUR", batch="po_2")
    world.publish_reports()
    result = world.run()
    assert world.classes(result) == ["amount_mismatch", "currency_mismatch"]


def test_two_rows_for_one_payment_is_a_duplicate_reference(world: World) -> None:
    """Two settlement rows for one provider payment: one matches, the other is a duplicate."""
    _clean_day(world, 2)
    world.settlement.append(replace(world.settlement[0], txn_id="txn_dup"))
    world.publish_reports()
    result = world.run()
    assert world.classes(result) == ["duplicate_reference"]
    assert result.findings[0].case_key == "duplicate_reference:simpsp|settlement|txn_dup"


def test_mt5_side_classes(world: World) -> None:
    """A done credit whose deal is gone, a deal with our reference nobody explains, two deals for
    one reference, a deal on another login, a deal of another amount, and a balance deal without any
    reference of ours. A re-run (the deals read again) changes no case."""
    made = [world.deposit(i, deal=(i != 1)) for i in range(1, 6)]
    world.publish_reports()
    t = at(DAY, 12)
    world.deals.add(7001, "dep:99999", "12.00", t)  # our prefix, no such credit
    world.deals.add(7001, f"dep:{made[1]['credit_id']}", "500.00", t)  # a second deal, same reference
    for d in list(world.deals.deals):
        if d.comment == f"dep:{made[2]['credit_id']}":
            world.deals.deals.remove(d)
            world.deals.deals.append(replace(d, login=7999))  # on another login
        if d.comment == f"dep:{made[3]['credit_id']}":
            world.deals.deals.remove(d)
            world.deals.deals.append(replace(d, profit=d.profit + 1))  # another amount
    world.deals.add(7002, "", "25.00", t)  # a deal without a comment
    result = world.run()
    assert world.classes(result) == [
        "credit_without_deal",
        "deal_amount_mismatch",
        "deal_on_other_login",
        "deal_without_record",
        "deal_without_reference",
        "two_deals_one_reference",
    ]
    again = world.run()  # the deals are read again by another run: the same evidence
    assert (again.cases["opened"], again.cases["updated"], again.cases["unchanged"]) == (0, 0, 6)


def test_two_deals_for_a_reference_of_no_operation_of_the_date(world: World) -> None:
    """Two deals with one reference are found whoever carries it: a reference nobody's operation
    has (both deals also without a record), and the reference of a credit of the day before whose
    deals this run read too (that credit explains them: nothing else). The evidence lists the deals
    by ticket, the same in a re-run."""
    _clean_day(world, 2)
    t = at(DAY, 12)
    first = world.deals.add(7001, "dep:88888", "12.00", t)
    second = world.deals.add(7001, "dep:88888", "13.00", t + 1000)
    late = world.deposit(50, at_ms=at(DAY, 0) - 60_000, settled=False)  # the day before, 23:59
    world.deals.add(7001, f"dep:{late['credit_id']}", "500.00", at(DAY, 0) + 1000)
    result = world.run()
    assert (
        world.classes(result)
        == ["deal_without_record", "deal_without_record"] + ["two_deals_one_reference"] * 2
    )
    found = {f.case_key: f for f in result.findings}
    unknown = found["two_deals_one_reference:dep:88888"]
    assert [d["ticket"] for d in unknown.evidence["deals"]] == [first.ticket, second.ticket]
    assert len(found[f"two_deals_one_reference:dep:{late['credit_id']}"].evidence["deals"]) == 2
    again = world.run()
    assert (again.cases["opened"], again.cases["updated"], again.cases["unchanged"]) == (0, 0, 4)


def test_not_credited_missing_journal_and_credit_amount(world: World) -> None:
    """A captured deposit never credited; money facts the books lack; a credit that pays another
    amount than was captured."""
    _clean_day(world, 2)
    world.deposit(7, credited=False)
    world.deposit(8, journals=False)
    world.publish_reports()
    world.deliver(
        "Mt5Credited",
        "pay-1",
        {
            "credit_id": 20_001,
            "deposit_reference": "dr-1x",
            "mt5_login": 7001,
            "amount_minor": 1,
            "currency": "USD",
            "deal_ticket": 1,
            "provider": "simpsp",
            "provider_payment_id": "pi_1",
            "payment_amount_minor": 1,
            "payment_currency": "USD",
            "fx_rate": None,
        },
        at(DAY, 9),
    )
    result = world.run()
    classes = world.classes(result)
    assert "not_credited" in classes
    assert classes.count("missing_journal") == 3  # capture:op-8, mt5-credit:10008, mt5-credit:20001
    keys = {f.case_key for f in result.findings}
    assert "not_credited:capture:op-7" in keys
    assert "missing_journal:capture:op-8" in keys


def test_bank_deposit_missing_different_and_unexpected(world: World) -> None:
    """Layer 3: payout batches against bank deposits: a batch paid short, a batch never paid, a
    deposit for a batch the report does not have."""
    _clean_day(world, 2)
    extra = world.deposit(3)
    world.settlement[-1] = replace(extra["line"], batch="po_2")  # type: ignore[arg-type]
    world.publish_reports(bank_delta={"po_1": -50})
    bank = world.reports.files[("bank_deposits", DAY)].decode().splitlines()
    kept = [line for line in bank if "po_2" not in line]
    kept.append(f"dep_x,po_zzz,{DAY.isoformat()},{DAY.isoformat()},USD,100,1,SIMPSP PAYOUT po_zzz")
    world.reports.files[("bank_deposits", DAY)] = ("\n".join(kept) + "\n").encode()
    result = world.run()
    assert world.classes(result) == [
        "bank_deposit_different",
        "bank_deposit_missing",
        "bank_deposit_unexpected",
    ]


def test_rerunning_a_date_gives_the_same_cases(world: World) -> None:
    """Two runs of the same inputs: the same findings, the cases opened once (second run: unchanged)."""
    _clean_day(world, 2)
    world.deposit(5, settled=False)
    world.publish_reports()
    first = world.run()
    second = world.run()
    assert [f.case_key for f in first.findings] == [f.case_key for f in second.findings]
    assert first.cases["opened"] == 1 and second.cases["opened"] == 0 and second.cases["unchanged"] == 1
    assert len(world.store.cases_where(scope=EVERY_MERCHANT)) == 1


def test_fixed_evidence_resolves_and_changed_evidence_reopens(world: World) -> None:
    """Opened, then the evidence fixed (the missing settlement row arrives in a new report version)
    and re-run: resolved; the same discrepancy back with different evidence: reopened, not duplicated."""
    _clean_day(world, 2)
    late = world.deposit(5, settled=False)
    world.publish_reports()
    assert world.classes(world.run()) == ["internal_only"]
    world.settlement.append(late["line"])  # type: ignore[arg-type]
    world.publish_reports()
    fixed = world.run()
    assert fixed.status == "clean" and fixed.cases["resolved"] == 1
    [case] = world.store.cases_where(scope=EVERY_MERCHANT)
    assert case["status"] == "resolved"
    world.settlement[-1] = replace(late["line"], gross_minor=49_000)  # type: ignore[arg-type]
    world.publish_reports()
    again = world.run()
    assert world.classes(again) == ["amount_mismatch"]
    assert again.cases["opened"] == 1  # another class, another case; the resolved one stays resolved
    statuses = sorted((c["case_class"], c["status"]) for c in world.store.cases_where(scope=EVERY_MERCHANT))
    assert statuses == [("amount_mismatch", "open"), ("internal_only", "resolved")]


def test_a_resolved_case_found_again_with_new_evidence_is_reopened(world: World) -> None:
    """A person resolved a case (no money moved); the same record later differs again: reopened."""
    _clean_day(world, 2)
    world.settlement[0] = replace(world.settlement[0], gross_minor=world.settlement[0].gross_minor + 1)
    world.publish_reports()
    world.run()
    [case] = world.store.cases_where(scope=EVERY_MERCHANT)
    with psycopg.connect(world.url, autocommit=True) as conn:
        conn.execute(
            "UPDATE cases SET status = 'resolved', resolution = 'PSP error acknowledged' WHERE id = %s",
            (case["id"],),
        )
    same = world.run()
    assert same.cases["unchanged"] == 1
    assert (
        world.store.cases_where(scope=EVERY_MERCHANT)[0]["status"] == "resolved"
    )  # same evidence: stays resolved
    world.settlement[0] = replace(world.settlement[0], gross_minor=world.settlement[0].gross_minor + 5)
    world.publish_reports()
    changed = world.run()
    assert changed.cases["reopened"] == 1
    [reopened] = world.store.cases_where(scope=EVERY_MERCHANT)
    assert reopened["status"] == "open" and reopened["reopened"] == 1


def test_grace_period_keeps_in_flight_out_and_a_late_one_in(world: World) -> None:
    """A deposit captured a few minutes before the run and not credited yet is in flight, not a
    case; the same deposit, run again after the grace period, is a case."""
    _clean_day(world, 2)
    as_of = at(DAY, 23, 30)
    world.deposit(8, credited=False, at_ms=as_of - 10 * 60_000)
    world.publish_reports()
    early = world.run(as_of_ms=as_of)
    assert early.status == "clean", early.findings
    assert early.counts["credits_in_flight"] == 1
    late = world.run(as_of_ms=as_of + 2 * HOUR_MS)
    assert world.classes(late) == ["not_credited"]


def test_mt5_unreachable_makes_the_run_incomplete_and_resolves_nothing(world: World) -> None:
    """No answer from MT5 is never "no deals": the run is incomplete, the MT5 layer is skipped, and
    an open case is not resolved by it."""
    made = _clean_day(world, 2)
    world.deals.deals = [d for d in world.deals.deals if d.comment != f"dep:{made[0]['credit_id']}"]
    assert world.classes(world.run()) == ["credit_without_deal"]
    world.deals.silent = "connect_failed"
    result = world.run()
    assert result.status == "incomplete"
    assert any("MT5" in p for p in result.problems)
    assert result.cases["resolved"] == 0
    assert world.store.cases_where(scope=EVERY_MERCHANT)[0]["status"] == "open"


def test_unreachable_psp_or_a_refused_report_is_incomplete(world: World) -> None:
    """No settlement report (PSP down) or a report that fails its checks: incomplete, not clean."""
    _clean_day(world, 1)
    world.reports.down = "connect_failed"
    assert world.run().status == "incomplete"
    world.reports.down = None
    world.reports.files[("settlement", DAY)] = b"business_date,oops\n"
    result = world.run()
    assert result.status == "incomplete"
    assert any("settlement report refused: line 1" in p for p in result.problems)


def test_two_runs_of_one_date_at_once_one_runs(world: World) -> None:
    """While a run of the date holds the lock, a second one refuses with a clear message; a second
    date is not blocked; with --wait it runs after the first."""
    _clean_day(world, 1)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with world.store.run_lock(DAY, wait=False):
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    try:
        with pytest.raises(RunInProgress, match="already running"):
            world.run()
        other = world.run(DAY.replace(day=29))
        assert other.status == "incomplete"  # no reports for that date, but it ran
    finally:
        release.set()
        holder.join()
    assert world.run(wait=True).status == "clean"


def test_a_crashed_run_is_marked_failed_by_the_next(world: World) -> None:
    """A run row left 'running' by a process that died (its lock went with its connection) is
    marked failed when the next run of the date starts."""
    _clean_day(world, 1)
    stale = world.store.start_run(DAY, at(DAY, 1))
    result = world.run()
    assert result.status == "clean"
    found = world.store.run(stale)
    assert found is not None and found["status"] == "failed"


def test_case_events_are_in_the_outbox(world: World) -> None:
    """CaseOpened and CaseResolved go out through the outbox in the case's own transaction."""
    _clean_day(world, 1)
    late = world.deposit(4, settled=False)
    world.publish_reports()
    world.run()
    world.settlement.append(late["line"])  # type: ignore[arg-type]
    world.publish_reports()
    world.run()
    with psycopg.connect(world.url) as conn:
        types = [r[0] for r in conn.execute("SELECT event_type FROM outbox ORDER BY id")]
    assert types == ["CaseOpened", "CaseResolved"]


def test_refunds_are_taken_back_from_mt5(world: World) -> None:
    """A refund of a deposit is matched to its MT5 debit (and the debit to its deal and journal):
    clean. A refund never taken back is not_debited; a debit of another amount is
    debit_amount_mismatch (and its deal then differs from nothing: it moved what the debit says)."""
    made = _clean_day(world, 3)
    world.refund(made[0], 1, 10_000)
    world.publish_reports()
    result = world.run()
    assert result.status == "clean", result.findings
    assert result.counts["takebacks_debited"] == 1
    world.refund(made[1], 2, 5_000, debited=False)
    world.refund(made[2], 3, 7_000, debit_amount=6_000)
    world.publish_reports()
    found = world.run()
    assert world.classes(found) == ["debit_amount_mismatch", "not_debited"]
    assert {f.case_key for f in found.findings} == {
        "not_debited:refund:rf-2",
        "debit_amount_mismatch:refund:rf-3",
    }
