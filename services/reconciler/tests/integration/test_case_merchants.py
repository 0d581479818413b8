"""A case's merchant on real PostgreSQL: derived from the records it names when a run opens or finds
it again, when an event opens it early, and by migration 0011 for the cases opened before it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from backbone.testing import databases
from backbone.testing.stack import Stack
from psycopg.types.json import Jsonb
from reconciler.adapters import pg_merchants
from reconciler.domain.cases import evidence_digest
from reconciler.domain.merchants import merchant_of, refs_of
from reconciler.testing.sources import SettlementLine
from reconciler.testing.world import DAY, World, at

pytestmark = pytest.mark.integration
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def _merchants(world: World) -> dict[str, str | None]:
    with psycopg.connect(world.url) as conn:
        return dict(conn.execute("SELECT case_key, merchant_id FROM cases").fetchall())


def _credit_attention(credit_id: int, status: str = "unknown") -> dict[str, Any]:
    return {
        "credit_id": credit_id,
        "deposit_reference": f"dr-{credit_id}",
        "mt5_login": 7001,
        "amount_minor": 50_000,
        "currency": "USD",
        "operation_kind": "credit",
        "credit_status": status,
        "reason": "conflicting deals",
        "case_id": None,
    }


def _payment_attention(merchant: str) -> dict[str, Any]:
    return {
        "merchant_id": merchant,
        "provider": "simpsp",
        "kind": "unknown_unresolved",
        "detail": "authorize UNKNOWN after 5 attempts (timeout)",
        "operation_id": "op-a9",
        "operation_type": "authorize",
        "operation_status": "UNKNOWN",
        "attempts": 5,
        "operation_started_at_ms": at(DAY, 9),
    }


def _unbalanced_journal(world: World, payment_id: str) -> None:
    entry = {"account": "psp_receivable", "direction": "debit", "amount_minor": 1, "currency": "USD"}
    body = {"journal_id": 9_001, "reference": "adjust:1", "business_date": DAY.isoformat()}
    world.deliver(
        "JournalPosted", payment_id, body | {"source_event_id": "e-1", "entries": [entry]}, at(DAY, 12)
    )


def test_a_runs_cases_carry_the_merchant_their_records_name(world: World) -> None:
    """One day's run: a money fact (internal_only, not_credited), a deposit's MT5 credit and a
    withdrawal's MT5 debit (credit_without_deal: by the payment's and the withdrawal's facts), a
    settlement refund row we have no fact for (external_only: by the capture of its intent), a
    journal, payment-state's and mt5-credit's attentions, two deals of one reference and a deal only
    an attention explains (by the comment) each give the case their merchant; a deal without our
    reference and a bank deposit give none."""
    world.deposit(1)
    world.deposit(2, settled=False)
    world.deposit(4, deal=False)
    world.deposit(6, credited=False)
    world.merchant = "m2"
    made = world.withdrawal(3)
    world.deals.deals = [d for d in world.deals.deals if d.comment != f"wdr:{made['debit_id']}"]
    world.settlement.append(
        SettlementLine("txn_rx", "refund", "pi_1", "re_x", "", "USD", -1_000, 0, "po_1", at(DAY, 11))
    )
    world.deals.add(7001, "dep:10001", "500.00", at(DAY, 10, 30))
    extra = world.deals.add(7001, "dep:10006", "500.00", at(DAY, 12))
    manual = world.deals.add(7001, "manual top-up", "10.00", at(DAY, 12))
    world.deliver("Mt5CreditNeedsAttention", "pay-6", _credit_attention(10_006), at(DAY, 12))
    world.deliver("PaymentNeedsAttention", "pay-9", _payment_attention("m3"), at(DAY, 12))
    _unbalanced_journal(world, "pay-1")
    world.publish_reports(bank_delta={"po_1": 1})
    world.run()
    assert _merchants(world) == {
        "internal_only:capture:op-2": "m1",
        "not_credited:capture:op-6": "m1",
        "credit_without_deal:mt5-credit:10004": "m1",
        f"credit_without_deal:mt5-debit:{made['debit_id']}": "m2",
        "external_only:simpsp|settlement|txn_rx": "m1",
        "unbalanced_journal:adjust:1": "m1",
        "stale_mt5_operation:mt5-row:10006": "m1",
        "stale_operation:payment:pay-9:op-a9:unknown_unresolved": "m3",
        "two_deals_one_reference:dep:10001": "m1",
        f"deal_without_record:deal:{extra.ticket}": "m1",
        f"deal_without_reference:deal:{manual.ticket}": None,
        "bank_deposit_different:simpsp|po_1": None,
    }


def test_cases_opened_early_by_events_carry_their_merchant(world: World) -> None:
    """Before any run: a monitor alert's case takes the merchant of its payment's capture, mt5-credit's
    attention the merchant of its row's payment, payment-state's attention its own; an attention
    about a payment none of our records know opens a case of no merchant."""
    made = world.deposit(1, credited=False)
    world.merchant = "m2"
    world.deposit(2, credited=False)
    alert = {
        "alert": "captured_not_credited",
        "state": "raised",
        "subject_key": "capture:op-1",
        "deposit_reference": "dr-1",
        "amount_minor": 50_000,
        "currency": "USD",
        "observed_at_ms": made["at_ms"],
        "subject_occurred_at_ms": made["at_ms"],
        "overdue_ms": 600_000,
        "after_ms": 600_000,
    }
    world.deliver("MonitorAlert", "pay-1", alert, at(DAY, 11))
    world.deliver("Mt5CreditNeedsAttention", "pay-2", _credit_attention(10_002), at(DAY, 11))
    world.deliver("PaymentNeedsAttention", "pay-9", _payment_attention("m3"), at(DAY, 11))
    world.deliver("Mt5CreditNeedsAttention", "pay-7", _credit_attention(10_007), at(DAY, 11))
    assert _merchants(world) == {
        "not_credited:capture:op-1": "m1",
        "stale_mt5_operation:mt5-row:10002": "m2",
        "stale_operation:payment:pay-9:op-a9:unknown_unresolved": "m3",
        "stale_mt5_operation:mt5-row:10007": None,
    }


def test_a_merchant_learned_later_reaches_the_case_when_a_run_finds_it_again(world: World) -> None:
    """An attention about a payment we knew nothing of opens a case of no merchant; once the
    payment's capture arrives, the next run finds the case again (its evidence unchanged) and gives
    it the capture's merchant."""
    world.deliver("Mt5CreditNeedsAttention", "pay-7", _credit_attention(10_007), at(DAY, 11))
    world.publish_reports()
    world.run()
    assert _merchants(world)["stale_mt5_operation:mt5-row:10007"] is None
    world.merchant = "m2"
    world.deposit(7, at_ms=at(DAY, 10), credited=False)
    world.publish_reports()
    again = world.run()
    assert again.cases["unchanged"] >= 1
    assert _merchants(world)["stale_mt5_operation:mt5-row:10007"] == "m2"


# -- migration 0011's backfill ------------------------------------------------------------------------

_FACT = (
    "INSERT INTO money_facts (source_key, kind, payment_id, merchant_id, provider, provider_object_id,"
    " amount_minor, currency, occurred_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, 'simpsp', %s, 100, 'USD', 0, %s, 'e')"
)
_OPERATION = (
    "INSERT INTO mt5_operations (source_key, kind, row_id, comment, payment_id, mt5_login, amount_minor,"
    " currency, deal_ticket, withdrawal_id, occurred_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, 7001, 100, 'USD', 1, %s, 0, %s, 'e')"
)
_ATTENTION = (
    "INSERT INTO attention (attention_key, source, payment_id, kind, detail, facts, raised_at_ms,"
    " business_date, event_id) VALUES (%s, %s, %s, 'unknown', 'd', %s, 0, %s, 'e')"
)
_CASE = (
    "INSERT INTO cases (case_key, case_class, severity, business_date, status, summary, evidence,"
    " evidence_digest) VALUES (%s, 'internal_only', 'medium', %s, 'open', 's', %s, %s)"
)
_SETTLED_REFUND = {"source_key": "simpsp|settlement|txn_r", "type": "refund", "payment_intent_id": "pi_1"}
BEFORE_0011: dict[str, dict[str, Any]] = {
    "fact": {"fact": {"merchant_id": "m1", "payment_id": "pay-1"}},
    "refund row": {"settlement": _SETTLED_REFUND | {"reference": ""}},
    "withdrawal debit": {"operation": {"payment_id": "wd_1", "withdrawal_id": "wd_1"}},
    "two deals": {"deals": [{"comment": "dep:10001"}, {"comment": "dep:10001"}]},
    "deal of an attention": {"deal": {"comment": "dep:10006"}},
    "payment attention": {"attention": {"payment_id": "pay-9", "facts": {"merchant_id": "m3"}}},
    "monitor": {"monitor": {"alert": "captured_not_credited"}, "payment_id": "pay-1"},
    "journal": {"journal": {"payment_id": "pay-1", "reference": "adjust:1"}},
    "deal without reference": {"deal": {"comment": "manual"}},
    "records that disagree": {
        "fact": {"merchant_id": "m1"},
        "settlement": {"type": "payout", "reference": "wd_1"},
    },
}


@pytest.fixture
def before_0011(stack: Stack, tmp_path: Path) -> Iterator[str]:
    """A database migrated up to 0010 only (the reconciler's source as it was before 0011)."""
    older = tmp_path / "migrations"
    older.mkdir()
    for path in sorted(MIGRATIONS.glob("*.sql")):
        if int(path.name[:4]) < 11:
            shutil.copy(path, older / path.name)
    url = databases.create_database(stack.pg_admin_url, [], prefix="recon_old")
    migrate(url, [backbone_source(), MigrationSource("reconciler", older)])
    yield url
    databases.drop_database(stack.pg_admin_url, url)


def test_the_migration_backfills_the_merchant_of_existing_cases(before_0011: str) -> None:
    """Cases opened before 0011 are given the merchant their records name by the migration's SQL,
    for every record kind, and it agrees with the domain's rule case by case (records of two
    merchants, or of none, stay NULL)."""
    with psycopg.connect(before_0011) as conn:
        for key, kind, payment, merchant, obj in (
            ("capture:op-1", "capture", "pay-1", "m1", "pi_1"),
            ("capture:op-6", "capture", "pay-6", "m1", "pi_6"),
            ("payout:wd_1", "payout", "wd_1", "m2", "po_w1"),
        ):
            conn.execute(_FACT, (key, kind, payment, merchant, obj, DAY))
        conn.execute(_OPERATION, ("mt5-credit:10001", "credit", 10_001, "dep:10001", "pay-1", None, DAY))
        conn.execute(_OPERATION, ("mt5-debit:40001", "debit", 40_001, "wdr:40001", "wd_1", "wd_1", DAY))
        facts = Jsonb({"comment": "dep:10006"})
        conn.execute(_ATTENTION, ("mt5-row:10006", "mt5_credit", "pay-6", facts, DAY))
        for name, evidence in BEFORE_0011.items():
            conn.execute(_CASE, (name, DAY, Jsonb(evidence), evidence_digest(evidence)))
    migrate(before_0011, [backbone_source(), MigrationSource("reconciler", MIGRATIONS)])
    with psycopg.connect(before_0011) as conn:
        filled = dict(conn.execute("SELECT case_key, merchant_id FROM cases").fetchall())
        with conn.cursor() as cur:
            by_rule = {
                name: merchant_of(refs_of(evidence), pg_merchants.known(cur, refs_of(evidence)))
                for name, evidence in BEFORE_0011.items()
            }
    assert (
        filled
        == by_rule
        == {
            "fact": "m1",
            "refund row": "m1",
            "withdrawal debit": "m2",
            "two deals": "m1",
            "deal of an attention": "m1",
            "payment attention": "m3",
            "monitor": "m1",
            "journal": "m1",
            "deal without reference": None,
            "records that disagree": None,
        }
    )
