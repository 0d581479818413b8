"""Layer 2c: money facts and MT5 operations <-> journals: what the ledger did not book, and what it
booked unbalanced."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Connection, Text, exists, func, literal, not_, select, union_all
from sqlalchemy.dialects.postgresql import insert

from reconciler.adapters.matching.sql import case_row, finding, row_json, scratch
from reconciler.adapters.tables import journals, money_facts, mt5_operations
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass


def journal_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """The date's facts and operations past the grace period without a journal, and the date's
    unbalanced journals."""
    j = journals.alias("j")
    missing = scratch(conn, "recon_missing_journal", Column("side", Text), Column("id", BigInteger))
    # the date's facts and operations together against the journals: one pass over the journals
    records = union_all(
        *(
            select(literal(name).label("side"), table.c.id, table.c.source_key).where(
                table.c.business_date == p.business_date, table.c.occurred_at_ms < p.settled_before_ms
            )
            for table, name in ((money_facts, "fact"), (mt5_operations, "operation"))
        )
    ).subquery("records")
    conn.execute(
        insert(missing).from_select(
            ["side", "id"],
            select(records.c.side, records.c.id).where(
                not_(exists().where(j.c.reference == records.c.source_key))
            ),
        )
    )
    counts: dict[str, int] = {}
    missing_journal = CaseClass.MISSING_JOURNAL
    for table, name in ((money_facts, "fact"), (mt5_operations, "operation")):
        rec = table.alias(f"r_{name}")
        counts[f"missing_journal_{name}"] = finding(
            conn,
            p,
            missing_journal,
            case_row(
                missing_journal,
                rec.c.source_key,
                ["the ledger has no journal for ", rec.c.source_key],
                func.jsonb_build_object(name, row_json(rec)),
            )
            .select_from(missing.join(rec, rec.c.id == missing.c.id))
            .where(missing.c.side == name),
        )
    unbalanced = CaseClass.UNBALANCED_JOURNAL
    counts["unbalanced_journal"] = finding(
        conn,
        p,
        unbalanced,
        case_row(
            unbalanced,
            j.c.reference,
            ["journal ", j.c.journal_id, " (", j.c.reference, ") does not balance"],
            func.jsonb_build_object("journal", row_json(j)),
        ).where(j.c.business_date == p.business_date, not_(j.c.balanced)),
    )
    return counts
