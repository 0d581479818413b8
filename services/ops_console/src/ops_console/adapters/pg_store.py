"""The console's store on its own PostgreSQL database (psycopg's async pool)."""

from __future__ import annotations

from typing import Any

from backbone.carddata import redact_card_numbers, redact_detail
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ops_console.application.ports import AuditEntry, Session
from ops_console.domain.operators import Operator
from ops_console.domain.permissions import Permission

_OPERATOR = "username, display_name, permissions, merchants"


def _operator(row: dict[str, Any]) -> Operator:
    known = {p.value for p in Permission}
    return Operator(
        row["username"],
        row["display_name"],
        frozenset(Permission(p) for p in row["permissions"] if p in known),
        tuple(row["merchants"]),
    )


class PgConsoleStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def ping(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute("SELECT 1")

    async def password_hash(self, username: str) -> str | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT password_hash FROM operators WHERE username = %s AND NOT disabled", (username,)
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def operator(self, username: str) -> Operator | None:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                f"SELECT {_OPERATOR} FROM operators WHERE username = %s AND NOT disabled", (username,)
            )
            row = await cur.fetchone()
        return None if row is None else _operator(row)

    async def add_operator(self, operator: Operator, password_hash: str, *, replace: bool = True) -> bool:
        """Add the operator; an existing one is replaced (and enabled again) only with ``replace``.
        Whether a row was written."""
        conflict = (
            " ON CONFLICT (username) DO UPDATE SET display_name = EXCLUDED.display_name,"
            " password_hash = EXCLUDED.password_hash, permissions = EXCLUDED.permissions,"
            " merchants = EXCLUDED.merchants, disabled = false"
            if replace
            else " ON CONFLICT (username) DO NOTHING"
        )
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO operators (username, display_name, password_hash, permissions, merchants)"
                " VALUES (%s, %s, %s, %s, %s)" + conflict,
                (
                    operator.username,
                    operator.display_name,
                    password_hash,
                    sorted(operator.permissions),
                    list(operator.merchants),
                ),
            )
            return cur.rowcount == 1

    async def disable(self, username: str) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute("UPDATE operators SET disabled = true WHERE username = %s", (username,))
            await conn.execute("DELETE FROM sessions WHERE username = %s", (username,))
            return cur.rowcount == 1

    async def operators(self) -> list[Operator]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(f"SELECT {_OPERATOR} FROM operators WHERE NOT disabled ORDER BY username")
            return [_operator(r) for r in await cur.fetchall()]

    async def open_session(self, token_sha256: bytes, username: str, csrf: str, ttl_s: int) -> None:
        async with self._pool.connection() as conn:
            await conn.execute("DELETE FROM sessions WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO sessions (token_sha256, username, csrf_token, expires_at)"
                " VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
                (token_sha256, username, csrf, ttl_s),
            )

    async def session(self, token_sha256: bytes) -> Session | None:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                f"SELECT s.csrf_token, s.expires_at, {', '.join('o.' + c for c in _OPERATOR.split(', '))}"
                " FROM sessions s JOIN operators o USING (username)"
                " WHERE s.token_sha256 = %s AND s.expires_at > now() AND NOT o.disabled",
                (token_sha256,),
            )
            row = await cur.fetchone()
        return None if row is None else Session(_operator(row), row["csrf_token"], row["expires_at"])

    async def close_session(self, token_sha256: bytes) -> None:
        async with self._pool.connection() as conn:
            await conn.execute("DELETE FROM sessions WHERE token_sha256 = %s", (token_sha256,))

    async def audit(
        self, operator: str, action: str, target: str, reason: str, outcome: str, detail: dict[str, Any]
    ) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO audit (operator, action, target, reason, outcome, detail)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    operator,
                    action,
                    redact_card_numbers(target)[:200],
                    redact_card_numbers(reason)[:500],
                    outcome,
                    Jsonb(redact_detail(detail)),
                ),
            )

    async def refused_logins(self, target: str, window_s: int) -> int:
        """Refused logins of one name within the window (the audit is the record; indexed by time)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM audit WHERE action = 'login' AND outcome = 'refused' AND target = %s"
                " AND at > now() - make_interval(secs => %s)",
                (target, window_s),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def audit_entries(
        self, *, operator: str | None, target: str | None, limit: int
    ) -> list[AuditEntry]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT id, at, operator, action, target, reason, outcome, detail FROM audit"
                " WHERE (%(op)s::text IS NULL OR operator = %(op)s)"
                " AND (%(target)s::text IS NULL OR target = %(target)s)"
                " ORDER BY id DESC LIMIT %(limit)s",
                {"op": operator, "target": target, "limit": limit},
            )
            return [AuditEntry(**r) for r in await cur.fetchall()]
