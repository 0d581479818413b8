"""What every matching layer's SQL is made of: a layer's pairs inserted into the run's partition of
``matches`` (``pair``), the few rows its findings are made of kept in scratch tables (``kept``,
``scratch``), and findings inserted under their stable case keys (``finding``, ``case_row``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    MetaData,
    SmallInteger,
    Table,
    and_,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import ColumnElement, FromClause, Select
from sqlalchemy.sql.dml import Insert

from reconciler.adapters.tables import findings, matches
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass

# a layer's code in ``matches.layer`` (migration 0006: a smallint, not the name)
LAYERS: Final = {"settlement_fact": 1, "capture_credit": 2, "takeback_debit": 3, "operation_deal": 4}


# Where a record sits (which run read it, which import version holds it, on which line) is not
# evidence: the same discrepancy found by another run must have the same evidence digest.
_NOT_EVIDENCE = ("id", "run_id", "import_id", "line_no")


def row_json(table: Any) -> ColumnElement[Any]:
    """A record as evidence: its row as JSON, without where it sits (``_NOT_EVIDENCE``)."""
    found: ColumnElement[Any] = func.to_jsonb(literal_column(table.name))
    for key in _NOT_EVIDENCE:
        found = found.op("-")(literal(key))
    return found


def case_key(case_class: CaseClass, key: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.concat(f"{case_class.value}:", key)


def case_row(
    case_class: CaseClass, key: ColumnElement[Any], summary: Sequence[Any], evidence: ColumnElement[Any]
) -> Select[Any]:
    """The columns of a finding of ``case_class`` (for ``finding``): its case key from ``key``, its
    summary the concatenation of ``summary`` (text and columns), its evidence."""
    return select(
        case_key(case_class, key).label("case_key"),
        func.concat(*summary).label("summary"),
        evidence.label("evidence"),
    )


def pair(
    conn: Connection,
    p: MatchParams,
    layer: str,
    pairs: Select[Any],
    kept: Table,
    flagged: Callable[[Any], ColumnElement[bool]] | None = None,
    also: Callable[[Any, ColumnElement[bool]], Insert] | None = None,
) -> int:
    """Insert one layer's pairs and count them, in one statement that reads the day's records once.

    ``pairs`` has one row per left record (DISTINCT ON the left, ordered by preference, a LEFT JOIN:
    ``right_id`` is NULL when the left has no candidate), with ``left_id`` and ``right_id`` first,
    then the layer's own columns (flags computed on the pair, a time). Of several lefts that want
    the same right, the first by ``left_id`` wins here, so the insert never conflicts and the unique
    constraints only stand guard (a violation is a bug, and fails the run loudly). A plain INSERT,
    not ON CONFLICT: speculative insertion costs ~5x.

    Every row that is not a winner, and every winner ``flagged`` picks, goes into ``kept`` (a
    temporary table of the transaction, with a ``won`` column): the few rows the findings are made
    of, so that no finding query scans the day again or reads the run's partition. ``also`` adds
    one more insert of the same statement that reads the ranked pairs (which rows won)."""
    q = pairs.subquery("candidates")
    ranked = (
        select(*q.c, func.row_number().over(partition_by=q.c.right_id, order_by=q.c.left_id).label("rank"))
        .cte("ranked")
        .prefix_with("MATERIALIZED")
    )
    won = and_(ranked.c.right_id.is_not(None), ranked.c.rank == 1)
    keep = not_(won) if flagged is None else or_(not_(won), flagged(ranked))
    names = [c.name for c in kept.columns]
    kept_rows = insert(kept).from_select(
        names, select(*(won.label("won") if n == "won" else ranked.c[n] for n in names)).where(keep)
    )
    target = run_matches(p.run_id)
    stmt = insert(target).from_select(
        ["run_id", "layer", "left_id", "right_id"],
        select(
            literal(p.run_id), literal(LAYERS[layer], SmallInteger), ranked.c.left_id, ranked.c.right_id
        ).where(won),
    )
    stmt = stmt.add_cte(kept_rows.cte("kept_rows"))
    if also is not None:
        stmt = stmt.add_cte(also(ranked, won).cte("also_rows"))
    return int(conn.execute(stmt.execution_options(preserve_rowcount=True)).rowcount)


def scratch(conn: Connection, name: str, *columns: Column[Any]) -> Table:
    """A temporary table dropped at the end of the run's transaction: scratch data (never WAL-logged,
    rebuilt by the next run if lost), never imports, matches or cases."""
    table = Table(name, MetaData(), *columns, prefixes=["TEMPORARY"], postgresql_on_commit="DROP")
    table.create(conn)
    return table


def kept(conn: Connection, layer: str, *flags: str) -> Table:
    """The scratch table ``pair`` keeps a layer's unmatched and flagged rows in."""
    return scratch(
        conn,
        f"recon_kept_{layer}",
        Column("left_id", BigInteger),
        Column("right_id", BigInteger),
        Column("rank", BigInteger),
        Column("won", Boolean),
        *(Column(flag, Boolean) for flag in flags),
        Column("at_ms", BigInteger),
    )


def run_matches(run_id: int) -> Table:
    """The run's own partition of ``matches``, filled without indexes during the run; ``seal``
    builds its two unique indexes by sort and attaches it (the constraint holds from then on: a
    record matched twice in a layer fails the run)."""
    return Table(f"matches_r{int(run_id)}", MetaData(), *(Column(c.name, c.type) for c in matches.columns))


def open_partition(conn: Connection, p: MatchParams) -> None:
    name = run_matches(p.run_id).name
    conn.execute(text(f"CREATE TABLE {name} (LIKE matches INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    conn.execute(text(f"ALTER TABLE {name} ADD CHECK (run_id = {int(p.run_id)})"))


def seal_partition(conn: Connection, p: MatchParams) -> None:
    name = run_matches(p.run_id).name
    conn.execute(text(f"ALTER TABLE matches ATTACH PARTITION {name} FOR VALUES IN ({int(p.run_id)})"))


def finding(conn: Connection, p: MatchParams, case_class: CaseClass, query: Select[Any]) -> int:
    """Insert the rows of ``query`` (case_key, summary, evidence) as findings of ``case_class``."""
    q = query.subquery()
    stmt = insert(findings).from_select(
        ["run_id", "case_key", "case_class", "summary", "evidence"],
        select(literal(p.run_id), q.c.case_key, literal(case_class.value), q.c.summary, q.c.evidence),
    )
    return len(conn.execute(stmt.on_conflict_do_nothing().returning(findings.c.case_key)).all())


def count(conn: Connection, table: FromClause, *where: ColumnElement[bool]) -> int:
    return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())
