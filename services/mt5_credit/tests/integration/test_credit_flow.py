"""The credit flow on a real PostgreSQL with the in-memory MT5: the seed's failure table at the
store level (claims, outcomes, resolver verdicts, debits, FX, bad input). Each test asserts how
many MT5 deals carry the row's comment afterwards. The same rows with real processes, Kafka and
the MT5 simulator are in test_credit_processes.py."""

from __future__ import annotations

import threading
import time

import psycopg
from backbone.postgres import connect
from mt5_credit.domain.intake import Account, NewRow
from mt5_credit.domain.model import CreditKind, CreditStatus
from mt5_credit.testing import World


def _one_credit(world: World, amount: int = 50_000) -> int:
    world.account(5001, "cust-1")
    ref = world.intent("cust-1", 5001, amount)
    world.captured(ref, amount)
    (row,) = world.rows()
    return int(row["id"])


def test_happy_path_credits_once_and_emits_once(world: World) -> None:
    """pending -> claimed -> done with the ticket; one deal 'dep:<id>'; one Mt5Credited with the amount."""
    cid = _one_credit(world)
    assert world.executor().run_once() == 1
    row = world.row(cid)
    assert (row["status"], row["attempts"]) == ("done", 1)
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1
    (event,) = world.events("Mt5Credited")
    assert (event["credit_id"], event["amount_minor"], event["deal_ticket"]) == (
        cid,
        50_000,
        row["mt5_deal_ticket"],
    )
    assert world.executor().run_once() == 0  # nothing left to claim


def test_duplicate_and_second_fact_for_one_payment_make_one_row(world: World) -> None:
    """The same capture delivered twice (two event ids) and a second capture fact: one row, one deal."""
    cid = _one_credit(world)
    ref = world.row(cid)["deposit_reference"]
    world.captured(ref, 50_000)
    world.captured(ref, 50_000)
    assert len(world.rows()) == 1
    world.executor().run_once()
    world.executor().run_once()
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1


def test_timeout_after_apply_is_unknown_and_the_lookup_finds_it(world: World) -> None:
    """MT5 applies but the answer is lost: unknown (no retry); the resolver finds the deal: done, 1 deal."""
    cid = _one_credit(world)
    world.mt5.script.append("silent_after")
    world.executor().run_once()
    assert world.row(cid)["status"] == "unknown"
    assert world.mt5.calls == 1
    assert world.resolver().run_once() == 1
    row = world.row(cid)
    assert row["status"] == "done" and row["mt5_deal_ticket"] == world.mt5.deals_with(f"dep:{cid}")[0].ticket
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1
    assert len(world.events("Mt5Credited")) == 1


def test_timeout_before_apply_goes_back_to_pending_and_credits_once(world: World) -> None:
    """Nothing applied, no answer: unknown; complete lookup says absent: pending; next claim credits: 1
    deal."""
    cid = _one_credit(world)
    world.mt5.script.append("silent_before")
    world.executor().run_once()
    world.resolver().run_once()
    assert world.row(cid)["status"] == "pending"
    world.executor().run_once()
    row = world.row(cid)
    assert (row["status"], row["attempts"]) == ("done", 2)
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1


def test_worker_dead_after_claim_lease_expires_to_unknown_never_pending(world: World) -> None:
    """A claim whose worker vanished (before or after calling MT5) becomes unknown when the lease ends."""
    cid = _one_credit(world)
    world.lease_ms = 1
    with world.conn.transaction():
        world.store.claim(10, 1)  # the "worker" claims and dies without calling MT5
    world.conn.execute("SELECT pg_sleep(0.01)")
    world.executor().run_once()  # the next pass expires the lease: unknown, not pending, no call
    assert world.row(cid)["status"] == "unknown"
    assert world.mt5.calls == 0
    world.resolver().run_once()
    world.lease_ms = 60_000
    world.executor().run_once()
    assert world.row(cid)["status"] == "done"
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1


def test_mt5_applied_then_our_db_write_failed_is_found_by_the_lookup(world: World) -> None:
    """The call applied but recording failed (the claim is still 'claimed'): lease -> unknown -> found."""
    cid = _one_credit(world)
    with world.conn.transaction():
        (_row,) = world.store.claim(10, 1)
    assert (
        world.mt5.balance(5001, 50_000, "USD", f"dep:{cid}", check_margin=True).__class__.__name__
        == "Applied"
    )
    world.conn.execute("SELECT pg_sleep(0.01)")
    world.executor().run_once()  # expires the lease
    world.resolver().run_once()
    assert world.row(cid)["status"] == "done"
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1


def test_late_definite_answer_after_lease_expiry_is_still_recorded(world: World) -> None:
    """A worker whose lease ran out but who got a ticket records it (proof beats a lookup), under its
    token."""
    cid = _one_credit(world)
    with world.conn.transaction():
        (claimed,) = world.store.claim(10, 1)
    world.conn.execute("SELECT pg_sleep(0.01)")
    with world.conn.transaction():
        world.store.expire_leases(10)
    with world.conn.transaction():
        assert world.store.finish(claimed, CreditStatus.DONE, "late", ticket=77)
    assert (world.row(cid)["status"], world.row(cid)["mt5_deal_ticket"]) == ("done", 77)


def test_clear_rejection_fails_with_a_case_and_no_deal(world: World) -> None:
    """MT5 refuses (retcode): failed, a case, Mt5CreditFailed with the retcode; no deal, no retry."""
    cid = _one_credit(world)
    world.mt5.script.append("refuse")
    world.executor().run_once()
    assert world.row(cid)["status"] == "failed"
    assert world.mt5.deals_with(f"dep:{cid}") == []
    assert world.cases() == [(f"credit:{cid}", "rejected", "refused")]
    (event,) = world.events("Mt5CreditFailed")
    assert event["retcode"] == "3"
    world.executor().run_once()
    assert world.mt5.calls == 1


def test_wrong_login_is_caught_before_any_call(world: World) -> None:
    """The login is re-mapped to another customer after the intent: precheck fails it, MT5 is never called."""
    cid = _one_credit(world)
    with world.conn.transaction():
        world.store.upsert_account(Account(5001, "intruder", "USD", True))
    world.executor().run_once()
    assert world.row(cid)["status"] == "failed"
    assert world.mt5.calls == 0
    assert world.cases()[0][1] == "precheck"


def test_conflicting_deal_stays_unknown_with_one_case(world: World) -> None:
    """A deal with our comment but another amount: unknown, needs a person, one case and one event,
    however often looked at."""
    cid = _one_credit(world)
    world.mt5.balance(5001, 49_999, "USD", f"dep:{cid}", check_margin=True)  # someone else's hand
    world.mt5.script.append("silent_before")
    world.executor().run_once()
    world.resolver().run_once()
    world.resolver().run_once()
    row = world.row(cid)
    assert (row["status"], row["needs_person"]) == ("unknown", True)
    assert [c[1] for c in world.cases()] == ["conflict"]
    assert len(world.events("Mt5CreditNeedsAttention")) == 1


def test_no_answer_stays_unknown_then_a_case_after_the_bound_and_settles_when_mt5_answers(
    world: World,
) -> None:
    """Silence is never 'no deal': the row stays unknown through every silent lookup; after 3, a case
    (one, with one Mt5CreditNeedsAttention) but the row is still looked up; when MT5 answers again
    the row settles by itself as done with the deal it finds (found by a fault drill: a 3 s MT5
    restart used to park every credit in flight for a person)."""
    cid = _one_credit(world)
    world.mt5.script.append("silent_after")
    world.executor().run_once()
    world.mt5.lookups_silent = True
    for _ in range(3):
        world.conn.execute("SELECT pg_sleep(0.01)")
        world.resolver().run_once()
        assert world.row(cid)["status"] == "unknown"
    assert world.row(cid)["silent_lookups"] == 3 and not world.row(cid)["needs_person"]
    assert [c[1] for c in world.cases()] == ["no_answer"]
    world.conn.execute("SELECT pg_sleep(0.01)")
    world.resolver().run_once()  # a 4th silent lookup: still one case, one event
    assert [c[1] for c in world.cases()] == ["no_answer"]
    assert len(world.events("Mt5CreditNeedsAttention")) == 1
    world.mt5.lookups_silent = False
    world.conn.execute("SELECT pg_sleep(0.01)")
    world.resolver().run_once()
    assert world.row(cid)["status"] == "done"
    assert len(world.mt5.deals_with(f"dep:{cid}")) == 1  # applied once, never twice


def test_two_workers_never_claim_the_same_row(world: World) -> None:
    """Two executors on two connections race over 40 rows: every row is claimed and credited exactly once."""
    world.account(5001, "cust-1")
    for n in range(40):
        world.captured(world.intent("cust-1", 5001, 1_000 + n), 1_000 + n, pi=f"pi_{n}")
    conns = [connect(world.url, autocommit=True) for _ in range(2)]
    try:
        executors = [world.executor(c) for c in conns]
        threads = [threading.Thread(target=lambda e=e: [e.run_once() for _ in range(5)]) for e in executors]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for c in conns:
            c.close()
    rows = world.rows()
    assert all(r["status"] == "done" and r["attempts"] == 1 for r in rows)
    assert all(len(world.mt5.deals_with(f"dep:{r['id']}")) == 1 for r in rows)
    assert len(world.events("Mt5Credited")) == 40


def test_partial_refund_then_chargeback_are_debits_linked_to_the_credit(world: World) -> None:
    """Refund 200 then a chargeback of the rest: two debit rows 'dbt:<id>', negative deals, credit
    untouched."""
    cid = _one_credit(world, 1_000)
    world.executor().run_once()
    ref = world.row(cid)["deposit_reference"]
    world.refunded(ref, 200, "rf1")
    world.refunded(ref, 200, "rf1")  # duplicate fact
    world.charged_back(ref, 800, "cb1")
    world.executor().run_once()
    debits = [r for r in world.rows() if r["kind"] == "debit"]
    assert [(d["amount_minor"], d["debit_reason"], d["status"], d["original_credit_id"]) for d in debits] == [
        (200, "refund", "done", cid),
        (800, "chargeback", "done", cid),
    ]
    assert [world.mt5.deals_with(f"dbt:{d['id']}")[0].amount_minor for d in debits] == [-200, -800]
    assert world.mt5.balances[5001] == 0
    assert world.row(cid)["status"] == "done"
    assert [e["debit_reason"] for e in world.events("Mt5Debited")] == ["refund", "chargeback"]
    world.charged_back(ref, 1, "cb2")  # nothing left to take back
    assert world.cases()[-1][1] == "refused"


def test_refund_waits_for_the_credit_and_money_gone_is_a_case(world: World) -> None:
    """A debit is not claimed before its credit is done; if the client already spent it (10019), a person
    decides."""
    cid = _one_credit(world, 1_000)
    ref = world.row(cid)["deposit_reference"]
    world.refunded(ref, 1_000, "rf1")
    world.mt5.script.append("silent_before")
    world.executor().run_once()  # credit -> unknown; the debit must wait
    debit = next(r for r in world.rows() if r["kind"] == "debit")
    assert debit["status"] == "pending"
    world.resolver().run_once()
    world.executor().run_once()  # the credit now done; the debit waits one more pass (claimed in batch order)
    world.executor().run_once()
    world.mt5.balances[5001]  # credited 1,000
    assert world.row(debit["id"])["status"] == "done"
    # Second deposit whose money is gone before the refund:
    ref2 = world.intent("cust-1", 5001, 500)
    world.captured(ref2, 500, pi="pi_2")
    world.executor().run_once()
    world.mt5.balances[5001] = 100  # the client traded it away
    world.refunded(ref2, 500, "rf2", pi="pi_2")
    world.executor().run_once()
    gone = next(r for r in world.rows() if r["source_key"] == "refund:rf2")
    assert gone["status"] == "failed" and gone["last_retcode"] == "10019"
    assert world.events("Mt5CreditNeedsAttention")[-1]["credit_status"] == "failed"


def test_fx_is_converted_once_and_kept_on_retry(world: World) -> None:
    """EUR payment into a USD account: converted at creation with rate/source/time stored; a retry uses it."""
    world.account(5001, "cust-1", "USD")
    ref = world.intent("cust-1", 5001, 10_000, "EUR")
    world.captured(ref, 10_000, "EUR")
    (row,) = world.rows()
    assert (row["amount_minor"], str(row["fx_rate"]), row["fx_source"]) == (10_835, "1.0835", "fixed-table")
    world.mt5.script.append("silent_before")
    world.executor().run_once()
    world.resolver().run_once()
    world.executor().run_once()
    (deal,) = world.mt5.deals_with(f"dep:{row['id']}")
    assert deal.amount_minor == 10_835
    assert world.events("Mt5Credited")[0]["fx_rate"] == "1.0835"


def test_bad_facts_open_cases_and_create_no_row(world: World) -> None:
    """No deposit reference, an unknown one, or a currency with no rate: a case with the reason, no row,
    no call."""
    world.account(5001, "cust-1", "USD")
    world.captured(None, pi="pi_a")
    world.captured("dpi_doesnotexist", pi="pi_b")
    ref = world.intent("cust-1", 5001, 100, "USD")
    world.captured(ref, 100, "GBP", pi="pi_c")
    world.captured(None, pi="pi_a")  # redelivered: still one case
    assert world.rows() == []
    assert [(s, k) for s, k, _ in world.cases()] == [
        ("payment:simpsp:pi_a", "refused"),
        ("payment:simpsp:pi_b", "refused"),
        ("payment:simpsp:pi_c", "refused"),
    ]
    assert "no FX rate GBP->USD" in world.cases()[2][2]
    world.executor().run_once()
    assert world.mt5.calls == 0


def test_the_database_refuses_a_done_row_without_ticket(world: World) -> None:
    """Schema invariants hold even against a buggy caller: 'done' needs a ticket; one ticket one row."""
    cid = _one_credit(world)
    try:
        world.conn.execute("UPDATE mt5_credits SET status = 'done' WHERE id = %s", (cid,))
        raise AssertionError("a done row without a ticket was accepted")
    except psycopg.errors.CheckViolation:
        pass


def test_a_row_whose_lease_ran_out_while_waiting_in_its_batch_is_never_sent(world: World) -> None:
    """Regression (found by the benchmark): worker A claims a batch, but its calls are slow; a row
    still waiting in A's batch expires, is looked up (absent: nothing was sent), and worker B credits
    it. When A reaches that row it must not call MT5: arming the claim fails, so one deal, not two."""
    world.account(5001, "cust-1")
    for n in range(2):
        world.captured(world.intent("cust-1", 5001, 100 + n), 100 + n, pi=f"pi_{n}")
    with world.conn.transaction():
        stale = world.store.claim(10, 1)  # worker A's batch, lease 1 ms
    world.conn.execute("SELECT pg_sleep(0.01)")
    world.executor().run_once()  # worker B: leases expired -> unknown
    world.resolver().run_once()  # absent -> pending
    world.executor().run_once()  # worker B credits both
    assert all(r["status"] == "done" for r in world.rows())
    for row in stale:  # worker A wakes up with its old batch
        world.executor().execute_claimed(row)
    assert world.mt5.calls == 2
    assert all(len(world.mt5.deals_with(f"dep:{r['id']}")) == 1 for r in world.rows())


def test_the_lease_and_the_dead_wait_count_from_the_call_not_the_claim(world: World) -> None:
    """Arming a claimed row right before its call restarts its lease and moves claimed_at to now."""
    cid = _one_credit(world)
    with world.conn.transaction():
        (row,) = world.store.claim(10, 60_000)
    world.conn.execute("SELECT pg_sleep(0.05)")
    with world.conn.transaction():
        armed = world.store.arm(row, 60_000)
    assert armed is not None and armed.claimed_at_ms is not None and row.claimed_at_ms is not None
    assert armed.claimed_at_ms >= row.claimed_at_ms + 40
    assert world.row(cid)["status"] == "claimed"


def test_two_payments_for_one_deposit_intent_credit_once_and_open_a_case(world: World) -> None:
    """Two different PSP payments captured for one deposit intent: one credit, one 'paid twice' case;
    the database refuses a second credit row for the intent even if a buggy caller skips the check."""
    cid = _one_credit(world)
    ref = world.row(cid)["deposit_reference"]
    world.captured(ref, 50_000, pi="pi_second")
    assert len(world.rows()) == 1
    assert world.cases()[-1][0] == "payment:simpsp:pi_second" and "paid twice" in world.cases()[-1][2]
    plan = NewRow(CreditKind.CREDIT, "payment:simpsp:pi_third", ref, 5001, "cust-1", 1, "USD", 1, "USD", None)
    try:
        with world.conn.transaction():
            world.store.insert_row(
                plan,
                payment_id="p3",
                provider="simpsp",
                provider_payment_id="pi_third",
                source_reference=None,
            )
        raise AssertionError("a second credit for one deposit intent was stored")
    except psycopg.errors.UniqueViolation:
        pass


def test_an_unanswered_call_is_dated_from_its_start_for_the_resolver(world: World) -> None:
    """A row called late in its batch without re-arming (its lease still covered the call) and left
    unknown gets claimed_at = the call's start, so the resolver's "surely dead" wait counts from the
    call, not from the earlier claim."""
    cid = _one_credit(world)
    claimed_mono = time.monotonic()
    with world.conn.transaction():
        (row,) = world.store.claim(10, 60_000)
    world.conn.execute("SELECT pg_sleep(0.2)")
    world.mt5.script.append("silent_before")
    world.executor().execute_claimed(row, claimed_mono)
    after = world.store.load_row(cid)
    assert after is not None and after.status.value == "unknown"
    assert after.claimed_at_ms is not None and row.claimed_at_ms is not None
    assert after.claimed_at_ms >= row.claimed_at_ms + 150


def test_no_capture_event_no_credit_whatever_the_browser_does(world: World) -> None:
    """Seed 000: the redirect never moves money. An intent alone (the browser came back, or never did)
    creates no credit and no MT5 call; only the captured event does, whenever it arrives."""
    world.account(5001, "cust-1")
    ref = world.intent("cust-1", 5001, 700)
    for _ in range(3):
        world.executor().run_once()
        world.resolver().run_once()
    assert world.rows() == [] and world.mt5.calls == 0
    world.captured(ref, 700)  # the signed webhook's capture, late or early: the only trigger
    world.executor().run_once()
    (row,) = world.rows()
    assert row["status"] == "done" and len(world.mt5.deals_with(f"dep:{row['id']}")) == 1


def test_a_refund_of_an_fx_deposit_is_debited_at_the_credits_rate(world: World) -> None:
    """EUR 100.00 credited as USD 108.35 at 1.0835; a EUR 40.00 refund debits USD 43.34 (the stored rate,
    never a new one), the debit row keeps that rate, and Mt5Debited carries both sides for the books."""
    world.account(5001, "cust-1", "USD")
    ref = world.intent("cust-1", 5001, 10_000, "EUR")
    world.captured(ref, 10_000, "EUR")
    world.executor().run_once()
    world.refunded(ref, 4_000, "rf-fx", currency="EUR")
    world.executor().run_once()
    debit = next(r for r in world.rows() if r["kind"] == "debit")
    assert (debit["status"], debit["amount_minor"], str(debit["fx_rate"])) == ("done", 4_334, "1.0835")
    (deal,) = world.mt5.deals_with(f"dbt:{debit['id']}")
    assert deal.amount_minor == -4_334
    (event,) = world.events("Mt5Debited")
    assert (event["payment_amount_minor"], event["payment_currency"], event["fx_rate"]) == (
        4_000,
        "EUR",
        "1.0835",
    )
