"""What callers read of deposits and their credit rows (JSON-ready dicts), straight from
PostgreSQL: a read needs no transaction and no port of its own (as the ledger's
``adapters/pg_reads.py``). Nothing here writes.

- a deposit intent with its credit rows, for its merchant, in one statement (``intent_view``, and
  ``intent_view_async`` on an event loop);
- one credit row, for its merchant (``credit_view``);
- the deposits on one MT5 login, for the merchants an operator may see (``deposits_on_login``).
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from mt5_credit.adapters.postgres_store import PgCreditStore

CREDIT_COLUMNS: Final = """c.id, c.kind, c.status, c.mt5_login, c.amount_minor, c.currency,
    c.payment_amount_minor, c.payment_currency, c.fx_rate::text, c.mt5_deal_ticket, c.attempts,
    c.debit_reason, c.original_credit_id, c.needs_person, c.last_reason, c.payment_id"""
CREDIT_VIEW: Final = (
    f"SELECT {CREDIT_COLUMNS} FROM mt5_credits c JOIN deposit_intents i USING (deposit_reference)"
)
CREDIT_FIELDS: Final = (
    "credit_id",
    "kind",
    "status",
    "mt5_login",
    "amount_minor",
    "currency",
    "payment_amount_minor",
    "payment_currency",
    "fx_rate",
    "deal_ticket",
    "attempts",
    "debit_reason",
    "original_credit_id",
    "needs_person",
    "last_reason",
    "payment_id",  # the payment this row follows: the console finds a deposit's story by its reference
)
INTENT_FIELDS: Final = ("deposit_reference", "customer_id", "mt5_login", "amount_minor", "currency")
_ON_LOGIN: Final = """SELECT deposit_reference, merchant_id, customer_id, mt5_login, amount_minor, currency,
    created_at
  FROM deposit_intents
  WHERE mt5_login = %s AND (%s::text[] IS NULL OR merchant_id = ANY(%s))
  ORDER BY created_at DESC, deposit_reference
  LIMIT %s"""
ON_LOGIN_LIMIT_MAX: Final = 100


def intent_json(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: fields[k] for k in INTENT_FIELDS}


def _credits(conn: psycopg.Connection[Any], references: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The credit rows of each of ``references`` (the caller checked they may be seen), by id."""
    rows = conn.execute(
        f"SELECT {CREDIT_COLUMNS}, c.deposit_reference FROM mt5_credits c"
        " WHERE c.deposit_reference = ANY(%s) ORDER BY c.id",
        (references,),
    ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {ref: [] for ref in references}
    for row in rows:
        out[row[-1]].append(dict(zip(CREDIT_FIELDS, row[:-1], strict=True)))
    return out


INTENT_VIEW: Final = f"""SELECT i.deposit_reference, i.customer_id, i.mt5_login, i.amount_minor, i.currency,
    {CREDIT_COLUMNS}
  FROM deposit_intents i LEFT JOIN mt5_credits c ON c.deposit_reference = i.deposit_reference
  WHERE i.deposit_reference = %s AND i.merchant_id = %s ORDER BY c.id"""


def intent_view(store: PgCreditStore, ref: str, merchant: str) -> dict[str, Any] | None:
    """The deposit intent ``ref`` with its credit rows, or None when it is not ``merchant``'s: one
    statement (``INTENT_VIEW``), as the broker polls it until its credit is done."""
    return intent_view_of(store.conn.execute(INTENT_VIEW, (ref, merchant)).fetchall())


async def intent_view_async(
    conn: psycopg.AsyncConnection[Any], ref: str, merchant: str
) -> dict[str, Any] | None:
    """``intent_view`` on the API's event loop (the broker's polls need no thread hop)."""
    cursor = await conn.execute(INTENT_VIEW, (ref, merchant))
    return intent_view_of(await cursor.fetchall())


def intent_view_of(rows: list[Any]) -> dict[str, Any] | None:
    """``INTENT_VIEW``'s rows (the intent's columns, then one credit row's, or NULLs) as the view."""
    if not rows:
        return None
    view: dict[str, Any] = dict(zip(INTENT_FIELDS, rows[0][: len(INTENT_FIELDS)], strict=True))
    credits = (row[len(INTENT_FIELDS) :] for row in rows if row[len(INTENT_FIELDS)] is not None)
    view["credits"] = [dict(zip(CREDIT_FIELDS, row, strict=True)) for row in credits]
    return view


def credit_view(conn: psycopg.Connection[Any], credit_id: int, merchant: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"{CREDIT_VIEW} WHERE c.id = %s AND i.merchant_id = %s", (credit_id, merchant)
    ).fetchone()
    return None if row is None else dict(zip(CREDIT_FIELDS, row, strict=True))


def deposits_on_login(
    conn: psycopg.Connection[Any], mt5_login: int, merchants: frozenset[str] | None, limit: int
) -> list[dict[str, Any]]:
    """The newest ``limit`` deposit intents on ``mt5_login`` with their credit rows, of
    ``merchants`` only (None: every merchant, for a service token's own caller)."""
    assert 0 < limit <= ON_LOGIN_LIMIT_MAX, "a bounded page"
    scope = None if merchants is None else sorted(merchants)
    rows = conn.execute(_ON_LOGIN, (mt5_login, scope, scope, limit)).fetchall()
    names = ("deposit_reference", "merchant_id", "customer_id", "mt5_login", "amount_minor", "currency")
    deposits = [{**dict(zip(names, row[:6], strict=True)), "created_at": row[6].isoformat()} for row in rows]
    credits = _credits(conn, [d["deposit_reference"] for d in deposits]) if deposits else {}
    for deposit in deposits:
        deposit["credits"] = credits[deposit["deposit_reference"]]
    assert all(merchants is None or d["merchant_id"] in merchants for d in deposits), "merchant scope"
    return deposits
