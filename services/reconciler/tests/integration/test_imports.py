"""Imports are immutable and versioned: the same file twice changes nothing; a different file for
the date is the next version with its differences; a refused file stores nothing; the database
itself refuses to change an import. The bulk path of a settlement file stores what the checked
parser reads, and declines (storing nothing) every file with a row it does not take as it stands."""

from __future__ import annotations

import csv
from dataclasses import replace

import psycopg
import pytest
from reconciler.application.imports import import_report
from reconciler.application.ports import AlreadyImported, Imported
from reconciler.domain.reports import ReportRefused, parse_report, plain_settlement
from reconciler.testing.sources import SettlementLine, settlement_csv
from reconciler.testing.world import DAY, World, at

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


VARIED = [
    *LINES,
    SettlementLine("txn_r", "refund", "pi_1", "re_1", "pay-1", "EUR", -500, 0, "po_2", at(DAY, 11), "rf-1"),
    SettlementLine("txn_d", "dispute", "pi_2", "dp_1", "", "JPY", -700, 1500, "po_2", at(DAY, 12)),
    SettlementLine("txn_ü", "charge", "pi_ü", "ch ü", "Zoë", "USD", 10**14, 0, "po_ü", at(DAY, 23, 59)),
    # 200 characters in 400 bytes: as long as a text may be
    SettlementLine("txn_l", "charge", "pi_l", "ch_l", "ü" * 200, "USD", 1000, 10, "po_1", at(DAY, 13)),
]
# a withdrawal's payout and its return: no payment intent (COPY reads the empty field as NULL, the
# bulk path stores '' as the checked parser does)
PAYOUTS = [
    SettlementLine("txn_p", "payout", "", "po_x1", "wd_1", "USD", -3000, 0, "po_1", at(DAY, 14)),
    SettlementLine("txn_q", "payout_return", "", "po_x1", "wd_1", "USD", 3000, 0, "po_1", at(DAY, 15)),
]
VARIED += PAYOUTS


def _stored(url: str, import_id: int) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT line_no, source_key, balance_transaction_id, type, payment_intent_id, source_id,"
            " reference, source_reference, currency, gross_minor, fee_minor, net_minor, payout_batch_id,"
            " created_at_ms FROM settlement_rows WHERE import_id = %s ORDER BY id",
            (import_id,),
        ).fetchall()


def test_a_plain_file_is_loaded_in_bulk_as_the_checked_parser_reads_it(world: World) -> None:
    """A file of plain rows (charges, a refund, a dispute, a payout and a payout return without a
    payment intent, no reference, non-ASCII text, a text of the longest length in more bytes, other
    times of day) is taken by the bulk path and stored
    exactly as the checked parser reads it, rows in line order."""
    data = settlement_csv(DAY, VARIED)
    plain = plain_settlement("simpsp", DAY, data)
    assert plain is not None and plain.rows == len(VARIED)
    result = world.store.import_plain_settlement(plain, data, "api")
    assert isinstance(result, Imported) and result.row_count == len(VARIED)
    parsed = parse_report("simpsp", "settlement", DAY, data)
    assert parsed.digest == plain.digest
    expected = [
        (r.line_no, r.source_key, r.balance_transaction_id, r.type, r.payment_intent_id, r.source_id,
         r.reference, r.source_reference, r.currency, r.gross_minor, r.fee_minor, r.net_minor,
         r.payout_batch_id, r.created_at_ms)
        for r in parsed.settlement
    ]  # fmt: skip  # packed: a few items a line read better than one each
    assert _stored(world.url, result.import_id) == expected


FILE = [*VARIED[:3], *PAYOUTS]


def _mutations() -> list[tuple[str, str, str]]:
    good = settlement_csv(DAY, FILE).decode()
    row = good.splitlines()[2]  # line 3: txn_2
    payout, back = good.splitlines()[4:6]
    return [
        ("payout sign", payout, payout.replace(",-3000,0,-3000,", ",3000,0,3000,")),
        ("return sign", back, back.replace(",3000,0,3000,", ",-3000,0,-3000,")),
        ("charge without intent", row, row.replace(",pi_2,", ",,")),
        ("payout intent padded", payout, payout.replace(",payout,,", ",payout, ,")),
        ("padded id", row, row.replace(",txn_2,", ", txn_2,")),
        ("no-break space", row, row.replace(",pi_2,", ",pi_2\u00a0,")),
        ("ideographic space", row, row.replace(",po_1,", ",\u3000po_1,")),
        ("wrong date", row, row.replace("2026-11-30,", "2026-11-29,", 1)),
        ("unknown currency", row, row.replace(",USD,", ",XYZ,")),
        ("padded currency", row, row.replace(",USD,", ", USD,")),
        ("plus sign", row, row.replace(",2000,", ",+2000,")),
        ("16 digits", row, row.replace(",2000,10,1990,", ",1000000000000000,10,999999999999990,")),
        ("not a number", row, row.replace(",2000,", ",2e3,")),
        ("leading zero", row, row.replace(",2000,", ",02000,")),
        ("minus zero", row, row.replace(",10,1990,", ",-0,2000,")),
        ("hex", row, row.replace(",2000,", ",0x7D0,")),
        ("net", row, row.replace(",1990,", ",1991,")),
        ("negative fee", row, row.replace(",10,1990,", ",-10,2010,")),
        ("sign", row, row.replace(",charge,", ",refund,")),
        ("type", row, row.replace(",charge,", ",transfer,")),
        ("charge as payout", row, row.replace(",charge,", ",payout,")),
        ("long text", row, row.replace(",pi_2,", f",{'p' * 201},")),
        ("long non-ASCII text", row, row.replace(",pi_2,", f",{'ü' * 201},")),
        ("empty id", row, row.replace(",txn_2,", ",,")),
        ("no zone", row, row.replace("Z", "")),
        ("time padded", row, row + " "),
        ("impossible time", row, row.replace("T10:00:00Z", "T24:00:00Z")),
        ("extra field", row, row + ",x"),
        ("missing field", row, row.rsplit(",", 1)[0]),
        ("blank line", row, row + "\n"),
        ("duplicate", row, row + "\n" + row),
        ("quoted", row, row.replace(",pi_2,", ',"pi_2",')),
        ("carriage return", row, row + "\r"),
        ("end marker", row, row + "\n\\."),
    ]


@pytest.mark.parametrize(("name", "row", "changed"), _mutations(), ids=lambda v: v if len(v) < 20 else "")
def test_the_bulk_path_declines_every_row_it_does_not_take_as_it_stands(
    world: World, name: str, row: str, changed: str
) -> None:
    """A file with one row the fast path would not take as it stands (padded, an unusual number,
    a wrong date, sign or type, a duplicate, a line COPY reads otherwise...) is declined whole by
    the bulk path with nothing stored; the import then does exactly what the checked parser says:
    the same refusal (line and reason), or the same rows."""
    data = settlement_csv(DAY, FILE).decode().replace(row, changed).encode()
    plain = plain_settlement("simpsp", DAY, data)
    if plain is not None:
        assert world.store.import_plain_settlement(plain, data, "api") is None, name
    assert _count(world.url, "imports") == 0 and _count(world.url, "settlement_rows") == 0
    try:
        parsed = parse_report("simpsp", "settlement", DAY, data)
    except (ReportRefused, csv.Error) as exc:
        with pytest.raises(type(exc)) as refused:
            import_report(world.store, "simpsp", "settlement", DAY, data, "file:x.csv")
        assert str(refused.value) == str(exc)
        assert _count(world.url, "imports") == 0
        return
    result = import_report(world.store, "simpsp", "settlement", DAY, data, "file:x.csv")
    assert isinstance(result, Imported)
    assert [r[1:] for r in _stored(world.url, result.import_id)] == [
        (r.source_key, r.balance_transaction_id, r.type, r.payment_intent_id, r.source_id, r.reference,
         r.source_reference, r.currency, r.gross_minor, r.fee_minor, r.net_minor, r.payout_batch_id,
         r.created_at_ms)
        for r in parsed.settlement
    ]  # fmt: skip  # packed: a few items a line read better than one each
