"""The settlement from Stripe on real PostgreSQL: the normalized bytes are imported by the same
strict path as the simulator's file and stored value for value; a source that serves no bank file
(Stripe) gives a run that is incomplete until the bank's deposits are imported, and clean after."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest
from reconciler.application.imports import import_report
from reconciler.application.ports import Imported
from reconciler.domain.reports import parse_report
from reconciler.domain.stripe_settlement import PaidOut, settlement_csv
from reconciler.testing.sources import bank_csv
from reconciler.testing.stripe import DAY, WINDOW, day_of_transactions, payout
from reconciler.testing.world import World

pytestmark = pytest.mark.integration


def test_the_normalized_stripe_file_is_imported_unchanged(world: World) -> None:
    """Stripe's payout normalized, then imported under provider stripe: the stored rows are the
    parser's rows (source keys, types, the refund's negative fee, the payout as batch); the bulk path
    declines a negative fee, so the checked parser decides, and the same bytes again change nothing."""
    data = settlement_csv(DAY, WINDOW, [PaidOut(payout(amount=6_710), day_of_transactions())])
    assert isinstance(data, bytes)
    imported = import_report(world.store, "stripe", "settlement", DAY, data, "api")
    assert isinstance(imported, Imported)
    with psycopg.connect(world.url) as conn:
        stored = conn.execute(
            "SELECT source_key, type, payment_intent_id, source_id, gross_minor, fee_minor, net_minor,"
            " payout_batch_id FROM settlement_rows WHERE import_id = %s ORDER BY id",
            (imported.import_id,),
        ).fetchall()
    parsed = parse_report("stripe", "settlement", DAY, data).settlement
    assert stored == [
        (
            r.source_key,
            r.type,
            r.payment_intent_id,
            r.source_id,
            r.gross_minor,
            r.fee_minor,
            r.net_minor,
            r.payout_batch_id,
        )
        for r in parsed
    ]
    assert [row[5] for row in stored] == [320, -30, 1_500]
    again = import_report(world.store, "stripe", "settlement", DAY, data, "api")
    assert not isinstance(again, Imported)


def test_a_source_without_a_bank_file_is_clean_only_with_the_imported_bank_file(world: World) -> None:
    """A source that serves the settlement only (as Stripe's does) is never asked for the bank file:
    without an imported one the run is incomplete and says so; once the bank's deposits are imported
    (import-bank), the same day reconciles clean."""
    world.reports = replace(world.reports, report_types=("settlement",))
    for i in (1, 2):
        world.deposit(i)
    world.publish_reports()  # the scripted bank file exists, but must not be fetched
    first = world.run()
    assert first.status == "incomplete"
    assert any("no bank-deposit file of simpsp" in p for p in first.problems), first.problems
    assert world.store.latest_import("simpsp", "bank_deposits", DAY) is None
    import_report(
        world.store, "simpsp", "bank_deposits", DAY, bank_csv(DAY, world.settlement), "file:bank.csv"
    )
    second = world.run()
    assert second.status == "clean", (second.problems, second.findings)
    assert second.counts["settlement_rows_matched"] == 2
