"""The simulator's state in PostgreSQL (database ``mt5_sim``), on an async psycopg pool.

Invariants kept here:
- a balance operation is one transaction: the account row is locked (``FOR UPDATE``), the pure
  ``decide`` function sees the locked state, and the deal insert and the balance/credit update
  commit together or not at all; nothing is ever half-applied;
- tickets come from the ``mt5_deal_ticket`` sequence, drawn after the account lock, so one login's
  tickets increase in commit order and no ticket is ever reused (``reset`` keeps the sequence);
- reads run in autocommit (one round trip each).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

import psycopg
from backbone.invariants import invariant, unreachable
from backbone.postgres import make_async_pool
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mt5_sim.application.ports import DealWindow, Decider, NewDeal, StoreConflict
from mt5_sim.domain.balance import Apply, BalanceOrder, Refusal
from mt5_sim.domain.model import Account, Deal, Group

_DEAL_COLUMNS: Final = "deal, login, action, amount, comment, time_msc, digits_currency, dealer"
_ACCOUNT_COLUMNS: Final = (
    "a.login, a.group_name, a.rights, a.name, a.leverage, a.balance, a.credit, a.margin, a.registered_s,"
    " g.name, g.currency, g.currency_digits"
)
_LOCK_ACCOUNT: Final = (
    f"SELECT {_ACCOUNT_COLUMNS} FROM mt5_accounts a JOIN mt5_groups g ON g.name = a.group_name"
    " WHERE a.login = %s FOR UPDATE OF a"
)
# The balance operation in one statement (autocommit: one transaction). ``acc`` locks the account
# row (FOR UPDATE returns its latest committed version), the UPDATE repeats decide()'s rules on that
# row (domain/balance.py is the specification; apply_balance cross-checks every call), and the deal
# is inserted only if the UPDATE moved the money. round() on numeric rounds half away from zero,
# as ROUND_HALF_UP does in decide().
_BALANCE_SQL: Final = f"""
WITH acc AS (
    SELECT {_ACCOUNT_COLUMNS} FROM mt5_accounts a JOIN mt5_groups g ON g.name = a.group_name
    WHERE a.login = %(login)s FOR UPDATE OF a
), op AS (
    SELECT login, round(%(amount)s::numeric, currency_digits) AS amount, currency_digits AS digits FROM acc
), moved AS (
    UPDATE mt5_accounts a
    SET balance = a.balance + CASE WHEN %(action)s = 3 THEN 0 ELSE op.amount END,
        credit = a.credit + CASE WHEN %(action)s = 3 THEN op.amount ELSE 0 END
    FROM op
    WHERE a.login = op.login AND (a.rights & 1) = 1 AND op.amount <> 0
      AND (op.amount > 0 OR (
          (NOT %(check_margin)s OR %(action)s = 5 OR a.balance + a.credit - a.margin + op.amount >= 0)
          AND (CASE WHEN %(action)s = 3 THEN a.credit ELSE a.balance END) + op.amount >= 0))
    RETURNING a.login
), deal AS (
    INSERT INTO mt5_deals (deal, login, action, amount, comment, time_msc, digits_currency, dealer)
    SELECT nextval('mt5_deal_ticket'), op.login, %(action)s, op.amount, %(comment)s, %(time_msc)s, op.digits,
           %(dealer)s
    FROM op JOIN moved ON moved.login = op.login
    RETURNING deal
)
SELECT acc.*, (SELECT deal FROM deal) FROM acc
"""
_BATCH_ROWS_MAX: Final = 100_000
CONNECT_TIMEOUT_S: Final = 10


def _deal(row: TupleRow) -> Deal:
    return Deal(
        int(row[0]),
        int(row[1]),
        int(row[2]),
        Decimal(row[3]),
        str(row[4]),
        int(row[5]),
        int(row[6]),
        int(row[7]),
    )


def _account(row: TupleRow) -> tuple[Account, Group]:
    account = Account(
        int(row[0]),
        str(row[1]),
        int(row[2]),
        str(row[3]),
        int(row[4]),
        Decimal(row[5]),
        Decimal(row[6]),
        Decimal(row[7]),
        int(row[8]),
    )
    return account, Group(str(row[9]), str(row[10]), int(row[11]))


def _msc_bounds(from_s: int, to_s: int) -> tuple[int, int]:
    """Both ends included, in whole seconds: ``[from_s * 1000, to_s * 1000 + 999]``."""
    return from_s * 1000, to_s * 1000 + 999


class PgStore:
    """The Store port on PostgreSQL."""

    def __init__(self, url: str, *, pool_size: int, synchronous_commit: bool) -> None:
        options = "" if synchronous_commit else "-c synchronous_commit=off"
        # backbone's pool: a connection is checked before it is handed out, so after a database
        # restart no request gets a dead one
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] = make_async_pool(
            url,
            size_min=pool_size,
            size_max=pool_size,
            name="mt5_sim",
            autocommit=True,
            timeout_s=CONNECT_TIMEOUT_S,
            options=options,
        )

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)

    async def close(self) -> None:
        await self._pool.close()

    async def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[TupleRow]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.encode(), params)
            return await cur.fetchall()

    async def ping(self) -> None:
        await self._rows("SELECT 1")

    # -- reads -----------------------------------------------------------------------------------

    async def group(self, name: str) -> Group | None:
        rows = await self._rows(
            "SELECT name, currency, currency_digits FROM mt5_groups WHERE name = %s", (name,)
        )
        return Group(str(rows[0][0]), str(rows[0][1]), int(rows[0][2])) if rows else None

    async def groups(self) -> list[Group]:
        rows = await self._rows("SELECT name, currency, currency_digits FROM mt5_groups ORDER BY name")
        return [Group(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    async def account(self, login: int) -> tuple[Account, Group] | None:
        rows = await self._rows(
            f"SELECT {_ACCOUNT_COLUMNS} FROM mt5_accounts a JOIN mt5_groups g ON g.name = a.group_name"
            " WHERE a.login = %s",
            (login,),
        )
        return _account(rows[0]) if rows else None

    async def deal(self, ticket: int) -> Deal | None:
        rows = await self._rows(f"SELECT {_DEAL_COLUMNS} FROM mt5_deals WHERE deal = %s", (ticket,))
        return _deal(rows[0]) if rows else None

    async def count_deals(self, window: DealWindow) -> int:
        low, high = _msc_bounds(window.from_s, window.to_s)
        rows = await self._rows(
            "SELECT count(*) FROM mt5_deals WHERE login = %s AND time_msc BETWEEN %s AND %s",
            (window.login, low, high),
        )
        return int(rows[0][0])

    async def page_deals(self, window: DealWindow, offset: int, total: int) -> list[Deal]:
        low, high = _msc_bounds(window.from_s, window.to_s)
        rows = await self._rows(
            f"SELECT {_DEAL_COLUMNS} FROM mt5_deals WHERE login = %s AND time_msc BETWEEN %s AND %s"
            " ORDER BY time_msc, deal OFFSET %s LIMIT %s",
            (window.login, low, high, offset, total),
        )
        return [_deal(r) for r in rows]

    async def batch_deals(
        self, logins: Sequence[int] | None, tickets: Sequence[int] | None, from_s: int, to_s: int
    ) -> list[Deal]:
        params: list[object]
        if tickets is not None:
            sql, params = f"SELECT {_DEAL_COLUMNS} FROM mt5_deals WHERE deal = ANY(%s)", [list(tickets)]
        else:
            low, high = _msc_bounds(from_s, to_s)
            sql = (
                f"SELECT {_DEAL_COLUMNS} FROM mt5_deals WHERE login = ANY(%s) AND time_msc BETWEEN %s AND %s"
            )
            params = [list(logins or []), low, high]
        rows = await self._rows(f"{sql} ORDER BY time_msc, deal LIMIT {_BATCH_ROWS_MAX}", params)
        return [_deal(r) for r in rows]

    async def logins_in_groups(self, groups: Sequence[str]) -> list[int]:
        rows = await self._rows("SELECT login FROM mt5_accounts WHERE group_name = ANY(%s)", (list(groups),))
        return [int(r[0]) for r in rows]

    async def latest_deals(self, login: int, limit: int) -> list[Deal]:
        rows = await self._rows(
            f"SELECT {_DEAL_COLUMNS} FROM mt5_deals WHERE login = %s ORDER BY deal DESC LIMIT %s",
            (login, limit),
        )
        return [_deal(r) for r in rows]

    async def other_login(self, login: int) -> int | None:
        rows = await self._rows(
            "SELECT login FROM mt5_accounts WHERE login <> %s"
            " ORDER BY (SELECT max(deal) FROM mt5_deals d WHERE d.login = mt5_accounts.login)"
            " DESC NULLS LAST, login LIMIT 1",
            (login,),
        )
        return int(rows[0][0]) if rows else None

    async def list_deals(
        self, login: int | None, comment: str | None, prefix: str | None, limit: int
    ) -> list[Deal]:
        rows = await self._rows(
            f"SELECT {_DEAL_COLUMNS} FROM mt5_deals"
            " WHERE (%(login)s::bigint IS NULL OR login = %(login)s)"
            " AND (%(comment)s::text IS NULL OR comment = %(comment)s)"
            " AND (%(prefix)s::text IS NULL OR starts_with(comment, %(prefix)s))"
            " ORDER BY deal LIMIT %(limit)s",
            {"login": login, "comment": comment, "prefix": prefix, "limit": limit},
        )
        return [_deal(r) for r in rows]

    # -- the balance operation -------------------------------------------------------------------

    async def apply_balance(
        self, order: BalanceOrder, decide: Decider, time_msc: int, dealer: int
    ) -> Deal | Refusal:
        """One statement, one round trip: lock the account, write the deal and move the money when
        the rules allow it. The pure ``decide`` then judges the locked pre-state; it must agree with
        what the statement did, or this is a bug and it fails loudly (the transaction is gone by
        then, so a disagreement can only be seen, never half-applied)."""
        params = {
            "login": order.login,
            "action": order.action,
            "amount": order.amount,
            "check_margin": order.check_margin,
            "comment": order.comment,
            "time_msc": time_msc,
            "dealer": dealer,
        }
        rows = await self._rows(_BALANCE_SQL, params)
        account, group = _account(rows[0]) if rows else (None, None)
        ticket = int(rows[0][12]) if rows and rows[0][12] is not None else None
        decision = decide(order, account, group)
        if isinstance(decision, Refusal):
            invariant(ticket is None, f"SQL wrote deal {ticket} that decide() refuses: {decision.reason}")
            return decision
        if ticket is None or group is None:
            unreachable(f"decide() applies the order for {order.login} but the statement wrote nothing")
        return Deal(
            ticket, order.login, order.action, decision.amount, order.comment, time_msc, group.digits, dealer
        )

    # -- control API writes ----------------------------------------------------------------------

    async def create_group(self, group: Group) -> None:
        await self._write(
            "INSERT INTO mt5_groups (name, currency, currency_digits) VALUES (%s, %s, %s)",
            (group.name, group.currency, group.digits),
        )

    async def create_account(self, account: Account) -> None:
        await self._write(
            "INSERT INTO mt5_accounts (login, group_name, rights, name, leverage, balance, credit, margin,"
            " registered_s) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                account.login,
                account.group,
                account.rights,
                account.name,
                account.leverage,
                account.balance,
                account.credit,
                account.margin,
                account.registered_s,
            ),
        )

    async def update_account(
        self,
        login: int,
        *,
        rights: int | None,
        group: str | None,
        balance: Decimal | None,
        credit: Decimal | None,
        margin: Decimal | None,
    ) -> bool:
        async with self._pool.connection() as conn:
            try:
                cur = await conn.execute(
                    "UPDATE mt5_accounts SET rights = coalesce(%s, rights),"
                    " group_name = coalesce(%s, group_name), balance = coalesce(%s, balance),"
                    " credit = coalesce(%s, credit), margin = coalesce(%s, margin) WHERE login = %s",
                    (rights, group, balance, credit, margin, login),
                )
            except psycopg.errors.IntegrityError as exc:
                raise StoreConflict(str(exc.diag.message_primary)) from exc
            return cur.rowcount == 1

    async def insert_deals(self, deals: Sequence[NewDeal], dealer: int) -> list[Deal]:
        """Manual dealer operations: each deal and its balance change, all in one transaction."""
        written: list[Deal] = []
        async with self._pool.connection() as conn, conn.transaction():
            for new in deals:
                cur = await conn.execute(_LOCK_ACCOUNT.encode(), (new.login,))
                row = await cur.fetchone()
                if row is None:
                    raise StoreConflict(f"unknown login {new.login}")
                group = _account(row)[1]
                order = BalanceOrder(new.login, new.action, new.amount, new.comment, check_margin=False)
                is_credit = new.action == 3
                apply = Apply(
                    new.amount,
                    Decimal(0) if is_credit else new.amount,
                    new.amount if is_credit else Decimal(0),
                )
                written.append(await _write_deal(conn, order, apply, new.time_msc, dealer, group))
        return written

    async def reset(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(b"TRUNCATE mt5_deals, mt5_accounts, mt5_groups, mt5_control_state")

    async def load_control_state(self) -> dict[str, Any] | None:
        rows = await self._rows("SELECT state FROM mt5_control_state WHERE name = 'control'")
        return dict(rows[0][0]) if rows else None

    async def save_control_state(self, state: dict[str, Any]) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                b"INSERT INTO mt5_control_state (name, state) VALUES ('control', %s)"
                b" ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, updated_at = now()",
                (Jsonb(state),),
            )

    async def _write(self, sql: str, params: Sequence[Any]) -> None:
        async with self._pool.connection() as conn:
            try:
                await conn.execute(sql.encode(), params)
            except psycopg.errors.IntegrityError as exc:
                raise StoreConflict(str(exc.diag.message_primary)) from exc


async def _write_deal(
    conn: psycopg.AsyncConnection[TupleRow],
    order: BalanceOrder,
    apply: Apply,
    time_msc: int,
    dealer: int,
    group: Group,
) -> Deal:
    """Insert the deal and move the balance/credit, inside the caller's transaction."""
    cur = await conn.execute(
        b"WITH moved AS (UPDATE mt5_accounts SET balance = balance + %(db)s, credit = credit + %(dc)s"
        b" WHERE login = %(login)s RETURNING login)"
        b" INSERT INTO mt5_deals (deal, login, action, amount, comment, time_msc, digits_currency, dealer)"
        b" SELECT nextval('mt5_deal_ticket'), login, %(action)s, %(amount)s, %(comment)s, %(time_msc)s,"
        b" %(digits)s, %(dealer)s FROM moved RETURNING deal",
        {
            "db": apply.balance_delta,
            "dc": apply.credit_delta,
            "login": order.login,
            "action": order.action,
            "amount": apply.amount,
            "comment": order.comment,
            "time_msc": time_msc,
            "digits": group.digits,
            "dealer": dealer,
        },
    )
    row = await cur.fetchone()
    if row is None:
        raise StoreConflict(f"account {order.login} vanished inside its own lock")
    return Deal(
        int(row[0]), order.login, order.action, apply.amount, order.comment, time_msc, group.digits, dealer
    )
