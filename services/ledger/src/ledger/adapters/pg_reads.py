"""Read queries of the HTTP API: balances (now or as of a time), journals, entries with paging.

Every function takes a connection and returns JSON-ready dicts (amounts as integers of minor
units, never floats). Balances "as of" a time read one REPEATABLE READ snapshot: the projection,
corrected by the entries posted after the time (or summed up to it, whichever side is shorter).
Journal ids grow with ``posted_at`` (see the chain head), so "posted by T" is "id <= cutoff(T)".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import psycopg

from ledger.domain.accounts import CHART, AccountKey, account_problem

_SIGNED: Final = "CASE e.direction WHEN 'debit' THEN e.amount_minor ELSE -e.amount_minor END"


def _normal_sign(code: str) -> int:
    return 1 if CHART[code].account_type.value in ("asset", "expense") else -1


def account_ids(conn: psycopg.Connection, code: str, currency: str, holder: str | None) -> list[int]:
    if holder is None:
        rows = conn.execute("SELECT id FROM accounts WHERE code = %s AND currency = %s", (code, currency))
    else:
        rows = conn.execute(
            "SELECT id FROM accounts WHERE code = %s AND currency = %s AND holder = %s",
            (code, currency, holder),
        )
    return [int(r[0]) for r in rows.fetchall()]


def balance(
    conn: psycopg.Connection, code: str, currency: str, holder: str | None, as_of: datetime | None
) -> dict[str, Any]:
    """The balance of one account, or of every holder's account of a per-holder code (holder None).
    Call inside a REPEATABLE READ transaction when ``as_of`` is given."""
    ids = account_ids(conn, code, currency, holder)
    head = int(conn.execute("SELECT last_journal_id FROM chain_head").fetchone()[0])  # type: ignore[index]
    row = conn.execute(
        "SELECT coalesce(sum(balance_minor), 0) FROM balances WHERE account_id = ANY(%s)", (ids,)
    )
    projected = int(row.fetchone()[0])  # type: ignore[index]
    cutoff = head if as_of is None else last_journal_by(conn, as_of)
    amount = projected if cutoff >= head else _balance_at(conn, ids, code, cutoff, head, projected)
    return {
        "account": code,
        "currency": currency,
        "holder": holder,
        "account_type": CHART[code].account_type.value,
        "accounts": len(ids),
        "balance_minor": amount,
        "as_of": as_of.isoformat() if as_of else None,
        "last_journal_id": cutoff,
    }


def last_journal_by(conn: psycopg.Connection, moment: datetime) -> int:
    row = conn.execute(
        "SELECT id FROM journals WHERE posted_at <= %s ORDER BY posted_at DESC, id DESC LIMIT 1", (moment,)
    ).fetchone()
    return int(row[0]) if row else 0


def _balance_at(
    conn: psycopg.Connection, ids: list[int], code: str, cutoff: int, head: int, projected: int
) -> int:
    sign = _normal_sign(code)
    total = f"SELECT coalesce(sum({_SIGNED}), 0) FROM entries e WHERE e.account_id = ANY(%s)"
    if cutoff >= head // 2:  # fewer entries after the cutoff than before: walk back from the projection
        row = conn.execute(f"{total} AND e.journal_id > %s", (ids, cutoff)).fetchone()
        return projected - sign * int(row[0])  # type: ignore[index]
    row = conn.execute(f"{total} AND e.journal_id <= %s", (ids, cutoff)).fetchone()
    return sign * int(row[0])  # type: ignore[index]


_JOURNAL_SELECT: Final = (
    "SELECT id, reference, kind, rule, business_date, posted_at, payment_id, source_type, source_id,"
    " source_detail, corrects_journal_id, encode(hash, 'hex') FROM journals"
)


def journals(
    conn: psycopg.Connection, *, where: str, params: tuple[Any, ...], after_id: int, limit: int
) -> list[dict[str, Any]]:
    rows = conn.execute(
        f"{_JOURNAL_SELECT} WHERE {where} AND id > %s ORDER BY id LIMIT %s", (*params, after_id, limit)
    ).fetchall()
    if not rows:
        return []
    entries = conn.execute(
        "SELECT e.journal_id, e.line_no, a.code, a.holder, e.direction, e.amount_minor, e.currency"
        " FROM entries e JOIN accounts a ON a.id = e.account_id WHERE e.journal_id = ANY(%s)"
        " ORDER BY e.journal_id, e.line_no",
        ([r[0] for r in rows],),
    ).fetchall()
    lines: dict[int, list[dict[str, Any]]] = {}
    for jid, line, code, holder, direction, amount, currency in entries:
        lines.setdefault(jid, []).append(
            {
                "line": line,
                "account": code,
                "holder": holder or None,
                "direction": direction,
                "amount_minor": amount,
                "currency": currency,
            }
        )
    return [_journal_view(r, lines.get(r[0], [])) for r in rows]


def _journal_view(row: tuple[Any, ...], entries: list[dict[str, Any]]) -> dict[str, Any]:
    (
        jid,
        reference,
        kind,
        rule,
        business_date,
        posted_at,
        payment_id,
        source_type,
        source_id,
        detail,
        corrects,
        hash_hex,
    ) = row
    return {
        "journal_id": jid,
        "reference": reference,
        "kind": kind,
        "rule": rule,
        "business_date": business_date.isoformat(),
        "posted_at": posted_at.isoformat(),
        "payment_id": payment_id,
        "source": {"type": source_type, "id": source_id, "detail": detail},
        "corrects_journal_id": corrects,
        "hash": hash_hex,
        "entries": entries,
    }


def entries(
    conn: psycopg.Connection,
    key: AccountKey,
    *,
    after: tuple[int, int],
    limit: int,
) -> list[dict[str, Any]]:
    """One account's entries in posting order, after the cursor (journal id, line)."""
    rows = conn.execute(
        "SELECT e.journal_id, e.line_no, j.reference, j.business_date, j.posted_at, e.direction,"
        " e.amount_minor, e.currency FROM accounts a JOIN entries e ON e.account_id = a.id"
        " JOIN journals j ON j.id = e.journal_id"
        " WHERE a.code = %s AND a.currency = %s AND a.holder = %s AND (e.journal_id, e.line_no) > (%s, %s)"
        " ORDER BY e.journal_id, e.line_no LIMIT %s",
        (key.code, key.currency, key.holder, after[0], after[1], limit),
    ).fetchall()
    return [
        {
            "journal_id": jid,
            "line": line,
            "reference": ref,
            "business_date": day.isoformat(),
            "posted_at": posted.isoformat(),
            "direction": direction,
            "amount_minor": amount,
            "currency": currency,
        }
        for jid, line, ref, day, posted, direction, amount, currency in rows
    ]


def key_problem(key: AccountKey) -> str | None:
    problem = account_problem(key, None)
    return None if problem is None else problem[1]


def negative_balances(conn: psycopg.Connection) -> dict[str, int]:
    """Account code -> number of its accounts whose balance (normal side) is below zero.

    Reads the partial index ``balances_negative_idx`` (migration 0003), empty while the books are
    healthy: cheap however many per-login accounts exist."""
    rows = conn.execute(
        "SELECT a.code, count(*) FROM balances b JOIN accounts a ON a.id = b.account_id"
        " WHERE b.balance_minor < 0 GROUP BY a.code"
    ).fetchall()
    return {str(code): int(n) for code, n in rows}
