"""The runtime role: what the ledger's processes log in as, and everything it may do, no more.

Migrations run as the database owner (``ledger``); the consumer, relay and API run as a separate
role (default ``ledger_app``) that can INSERT and SELECT journals, entries and accounts but has no
UPDATE, DELETE or TRUNCATE on them (and, not being the owner, cannot disable the append-only
triggers either). Roles are cluster-wide while grants are per database, so creation is idempotent
and survives a race with another provisioner (two test databases at once, two deploys).

Run ``python -m ledger provision-role --admin-url <superuser URL of the ledger database>`` after
``migrate``, and again after a migration adds a table.
"""

from __future__ import annotations

import re
from typing import Final

import psycopg
from backbone.postgres import connect
from psycopg import errors, sql

_ROLE_RE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
APPEND_ONLY: Final = ("accounts", "journals", "entries")
_GRANTS: Final = (
    ("SELECT", ("account_codes", "schema_migrations")),
    ("SELECT, INSERT", APPEND_ONLY),
    ("SELECT, INSERT, UPDATE", ("balances",)),  # projections move with every posting
    ("SELECT, UPDATE", ("chain_head",)),
    (
        "SELECT, INSERT, UPDATE, DELETE",
        ("outbox", "processed_events", "consumer_attempts", "consumer_in_flight"),
    ),
    ("SELECT, INSERT, UPDATE", ("dead_letters",)),  # operators resolve dead letters (replay/discard)
    ("SELECT, INSERT", ("payment_traces",)),  # each payment's trace, written once (ADR 0012)
)


def ensure_role(conn: psycopg.Connection, role: str, password: str) -> bool:
    """Create ``role`` (LOGIN, nothing else) unless it exists; True if this call created it.
    An existing role's password is left alone (changing it would cut off whoever uses it)."""
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
        return False
    try:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    except (errors.DuplicateObject, errors.UniqueViolation):
        return False  # another provisioner created it a moment ago
    return True


def grant_runtime(conn: psycopg.Connection, role: str) -> None:
    """Grant ``role`` exactly what the runtime needs in the connected database (idempotent)."""
    ident = sql.Identifier(role)
    database = conn.info.dbname
    # TEMPORARY: the store stages each batch in session temp tables before one INSERT statement.
    conn.execute(
        sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(sql.Identifier(database), ident)
    )
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident))
    for privileges, tables in _GRANTS:
        conn.execute(
            sql.SQL("GRANT {} ON {} TO {}").format(
                sql.SQL(privileges), sql.SQL(", ").join(map(sql.Identifier, tables)), ident
            )
        )
    conn.execute(
        sql.SQL("REVOKE UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, APPEND_ONLY)), ident
        )
    )
    conn.execute(sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {}").format(ident))


def provision_runtime_role(admin_url: str, role: str, password: str) -> bool:
    """Create the role if missing and grant it the runtime privileges in ``admin_url``'s database."""
    if not _ROLE_RE.fullmatch(role):
        raise ValueError("role names are lower-case letters, digits and _")
    with connect(admin_url, autocommit=True, application_name="ledger-provision") as conn:
        created = ensure_role(conn, role, password)
        with conn.transaction():
            grant_runtime(conn, role)
    return created
