"""The database enforces the ledger's rules itself, against raw SQL: append-only for everyone, no
UPDATE/DELETE/TRUNCATE privileges for the runtime role, balanced journals only, floors, one role
shared safely by many databases."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing import stack as test_stack
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.adapters.roles import provision_runtime_role
from ledger.application.posting import post_drafts
from ledger.bootstrap import outbox_writer
from ledger.domain.journals import JournalDraft
from ledger.domain.rule_base import EventMeta, PostingPolicy
from ledger.domain.rules import draft_for_event
from ledger.settings import LedgerSettings
from ledger.testing.database import MIGRATIONS, LedgerDatabase, with_user
from ledger.testing.facts import deposit
from psycopg import errors, sql

INSERT = """
WITH j AS (
    INSERT INTO journals (id, reference, kind, rule, business_date, posted_at, payment_id, source_type,
                          source_id, source_detail, content_digest, prev_hash, hash)
    VALUES (%(id)s, %(ref)s, 'posting', 'raw', '2025-12-01', now(), 'p', 'event', 'e', '{}',
            %(z)s, %(z)s, %(z)s)
    RETURNING id
)
INSERT INTO entries (journal_id, line_no, account_id, direction, amount_minor, currency)
SELECT * FROM unnest(%(jid)s::bigint[], %(line)s::smallint[], %(acc)s::bigint[], %(dir)s::text[],
                     %(amt)s::bigint[], %(cur)s::text[])
"""


def seed(db: LedgerDatabase) -> None:
    """Two journals posted the normal way (capture + MT5 credit), as the runtime role."""
    _, _, outbox = outbox_writer(LedgerSettings())
    drafts = []
    for fact in deposit(1, amount_minor=1000, login=42):
        meta = EventMeta(fact.event_id, fact.event_type, fact.payment_id, fact.occurred_at_ms, "t", "t", 0, 0)
        result = draft_for_event(meta, fact.body, PostingPolicy())
        assert isinstance(result, JournalDraft)
        drafts.append(result)
    with connect(db.app_url) as conn, conn.transaction():
        post_drafts(PgLedgerStore(conn, outbox, "ledger.events"), drafts)


def raw_journal(
    conn: psycopg.Connection,
    journal_id: int,
    lines: list[tuple[int, str, int, str]],
    target: int | None = None,
) -> None:
    """Insert a journal and its entries (account id, direction, amount, currency) in one statement."""
    conn.execute(
        INSERT,
        {
            "id": journal_id,
            "ref": f"raw:{journal_id}",
            "z": bytes(32),
            "jid": [target or journal_id] * len(lines),
            "line": list(range(1, len(lines) + 1)),
            "acc": [x[0] for x in lines],
            "dir": [x[1] for x in lines],
            "amt": [x[2] for x in lines],
            "cur": [x[3] for x in lines],
        },
    )


def account_id(conn: psycopg.Connection, code: str) -> int:
    row = conn.execute("SELECT id FROM accounts WHERE code = %s", (code,)).fetchone()
    assert row is not None
    return int(row[0])


def refused(url: str, statement: str, expected: type[Exception], params: Any = None) -> None:
    with connect(url) as conn, pytest.raises(expected):
        conn.execute(statement.encode(), params)


def test_the_runtime_role_cannot_update_delete_or_truncate_the_books(ledger_db: LedgerDatabase) -> None:
    """UPDATE, DELETE, TRUNCATE on journals, entries and accounts: permission denied; nor can it switch
    the append-only triggers off or drop them (it does not own the tables)."""
    seed(ledger_db)
    updates = {"journals": "reference = 'x:1'", "entries": "amount_minor = 1", "accounts": "holder = holder"}
    for table, change in updates.items():
        refused(ledger_db.app_url, f"UPDATE {table} SET {change}", errors.InsufficientPrivilege)
        refused(ledger_db.app_url, f"DELETE FROM {table}", errors.InsufficientPrivilege)
        refused(ledger_db.app_url, f"TRUNCATE {table} CASCADE", errors.InsufficientPrivilege)
    refused(
        ledger_db.app_url,
        "ALTER TABLE entries DISABLE TRIGGER entries_append_only",
        errors.InsufficientPrivilege,
    )
    refused(ledger_db.app_url, "DROP TRIGGER journals_append_only ON journals", errors.InsufficientPrivilege)
    refused(ledger_db.app_url, "SET session_replication_role = replica", errors.InsufficientPrivilege)
    with connect(ledger_db.admin_url) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (4,)


def test_even_the_owner_and_superuser_cannot_update_or_delete_journals(ledger_db: LedgerDatabase) -> None:
    """The append-only triggers refuse everyone, not only the runtime role."""
    seed(ledger_db)
    refused(
        ledger_db.admin_url, "UPDATE entries SET amount_minor = amount_minor + 1", errors.RestrictViolation
    )
    refused(ledger_db.admin_url, "DELETE FROM journals WHERE id = 2", errors.RestrictViolation)
    refused(ledger_db.admin_url, "TRUNCATE entries", errors.RestrictViolation)


def test_an_unbalanced_or_incomplete_journal_cannot_commit_even_from_raw_sql(
    ledger_db: LedgerDatabase,
) -> None:
    """As the runtime role, by hand: debits != credits, one line, no lines, a wrong currency, and lines
    added to a posted journal later are all refused; a balanced journal is accepted."""
    seed(ledger_db)
    with connect(ledger_db.app_url, autocommit=True) as conn:
        psp, pending = account_id(conn, "psp_receivable"), account_id(conn, "client_deposits_pending")
        bad = {
            "unbalanced": [(psp, "debit", 100, "EUR"), (pending, "credit", 99, "EUR")],
            "one line": [(psp, "debit", 100, "EUR")],
            "no lines": [],
            "wrong currency": [(psp, "debit", 100, "USD"), (pending, "credit", 100, "USD")],
            "unknown account": [(psp, "debit", 100, "EUR"), (999_999, "credit", 100, "EUR")],
        }
        for name, lines in bad.items():
            with pytest.raises(errors.CheckViolation):
                raw_journal(conn, 3, lines)
            assert conn.execute("SELECT count(*) FROM journals").fetchone() == (2,), name
        with pytest.raises(errors.CheckViolation):  # a balanced pair appended to journal 1
            conn.execute(
                "INSERT INTO entries VALUES (1, 3, %s, 'debit', 5, 'EUR'), (1, 4, %s, 'credit', 5, 'EUR')",
                (psp, pending),
            )
        raw_journal(conn, 3, [(psp, "debit", 100, "EUR"), (pending, "credit", 100, "EUR")])
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (6,)


def test_a_projection_cannot_go_below_its_floor_even_from_raw_sql(ledger_db: LedgerDatabase) -> None:
    """The client's MT5 account holds 1000; setting it to -1 by hand violates the balances CHECK."""
    seed(ledger_db)
    with connect(ledger_db.app_url) as conn:
        client = account_id(conn, "client_mt5_balances")
        with pytest.raises(errors.CheckViolation):
            conn.execute("UPDATE balances SET balance_minor = -1 WHERE account_id = %s", (client,))


def test_many_databases_provision_the_same_new_role_at_once(stack: test_stack.Stack) -> None:
    """Roles are cluster-wide: four databases provisioning one brand-new role concurrently all succeed,
    exactly one creates it, and each database grants it exactly the runtime privileges."""
    role = f"ledger_race_{uuid.uuid4().hex[:8]}"
    urls = [databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="ledger") for _ in range(4)]
    created: list[bool] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(urls))

    def provision(url: str) -> None:
        barrier.wait()
        try:
            created.append(provision_runtime_role(url, role, "pw-race"))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=provision, args=(url,)) for url in urls]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failures == [] and sorted(created) == [False, False, False, True]
        for url in urls:
            with connect(with_user(url, role, "pw-race")) as conn:
                conn.execute("SELECT count(*) FROM journals")
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute("DELETE FROM journals")
    finally:
        for url in urls:
            databases.drop_database(stack.pg_admin_url, url)
        with connect(stack.pg_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
