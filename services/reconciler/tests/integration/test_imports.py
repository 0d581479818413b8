"""Imports are immutable and versioned: the same file twice changes nothing; a different file for
the date is the next version with its differences; a refused file stores nothing; the database
itself refuses to change an import."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest
from reconciler.application.imports import import_report
from reconciler.application.ports import AlreadyImported, Imported
from reconciler.domain.reports import ReportRefused
from reconciler.testing.world import DAY, SettlementLine, World, at, settlement_csv

pytestmark = pytest.mark.integration
LINES = [
    SettlementLine(
        f"txn_{i}", "charge", f"pi_{i}", f"ch_{i}", f"pay-{i}", "USD", 1000 * i, 10, "po_1", at(DAY, 10)
    )
    for i in range(1, 4)
]


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        return int(row[0])


def test_same_file_twice_is_a_no_op_and_a_changed_file_is_a_new_version(world: World) -> None:
    """Import, import the same bytes (AlreadyImported, nothing written), then a file with one row
    changed, one removed and one added: version 2 with exactly those differences."""
    first = import_report(world.store, "simpsp", "settlement", DAY, settlement_csv(DAY, LINES), "file:a.csv")
    assert isinstance(first, Imported) and first.version == 1
    again = import_report(world.store, "simpsp", "settlement", DAY, settlement_csv(DAY, LINES), "file:a.csv")
    assert again == AlreadyImported(first.import_id, 1)
    assert _count(world.url, "imports") == 1 and _count(world.url, "settlement_rows") == 3
    changed = [replace(LINES[0], gross_minor=999), LINES[1], replace(LINES[2], txn_id="txn_9")]
    second = import_report(world.store, "simpsp", "settlement", DAY, settlement_csv(DAY, changed), "api")
    assert isinstance(second, Imported) and second.version == 2
    assert second.changes["changed"] == ["simpsp|settlement|txn_1"]
    assert second.changes["removed"] == ["simpsp|settlement|txn_3"]
    assert second.changes["added"] == ["simpsp|settlement|txn_9"]
    assert world.store.latest_import("simpsp", "settlement", DAY) == second.import_id


def test_a_refused_file_stores_nothing(world: World) -> None:
    """A file with a bad line: ReportRefused naming it, and no import row, no settlement row."""
    text = settlement_csv(DAY, LINES).decode().replace(",USD,2000,", ",XXX,2000,")
    with pytest.raises(ReportRefused) as refused:
        import_report(world.store, "simpsp", "settlement", DAY, text.encode(), "file:bad.csv")
    assert refused.value.line == 3
    assert _count(world.url, "imports") == 0 and _count(world.url, "settlement_rows") == 0


def test_imports_cannot_be_changed_in_the_database(world: World) -> None:
    """UPDATE or DELETE on an import or its rows is refused by a trigger."""
    import_report(world.store, "simpsp", "settlement", DAY, settlement_csv(DAY, LINES), "file:a.csv")
    with psycopg.connect(world.url) as conn:
        for sql in ("UPDATE settlement_rows SET gross_minor = 1", "DELETE FROM imports"):
            with pytest.raises(psycopg.errors.RaiseException, match="immutable"):
                conn.execute(sql)
            conn.rollback()
