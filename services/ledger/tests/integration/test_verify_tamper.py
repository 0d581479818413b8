"""Tamper evidence on real PostgreSQL: a superuser who bypasses the triggers is caught by ``verify``,
which names the first broken link; ``check-balances`` proves projections against entries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backbone.postgres import connect
from ledger.__main__ import main
from ledger.testing.database import LedgerDatabase
from ledger.testing.facts import deposit
from ledger.testing.posting import post_facts


def seed(db: LedgerDatabase, payments: int) -> None:
    """Post payments through the consumer's handler (captures + credits + refunds), as the runtime role."""
    post_facts(db.app_url, [f for n in range(1, payments + 1) for f in deposit(n, ending="refunded")])


def cli(db: LedgerDatabase, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(list(args), {"DATABASE_URL": db.app_url})
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def tamper(db: LedgerDatabase, *statements: str) -> None:
    """As the superuser, with triggers off (session_replication_role = replica)."""
    with connect(db.admin_url) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for statement in statements:
            conn.execute(statement.encode())


def test_verify_passes_an_honest_ledger_and_balances_check(
    ledger_db: LedgerDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """16 journals: verify ok, every journal checked; rebuilt balances equal the projections."""
    seed(ledger_db, 4)
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert (code, report["ok"], report["journals_checked"], report["first_break"]) == (0, True, 16, None)
    code, report = cli(ledger_db, "check-balances", capsys=capsys)
    assert (code, report["ok"], report["mismatches"]) == (0, True, [])


def test_verify_names_a_changed_amount(ledger_db: LedgerDatabase, capsys: pytest.CaptureFixture[str]) -> None:
    """Both lines of journal 6 raised by one (still balanced!): verify fails at journal 6, hash mismatch;
    the projections no longer match the entries either."""
    seed(ledger_db, 4)
    tamper(ledger_db, "UPDATE entries SET amount_minor = amount_minor + 1 WHERE journal_id = 6")
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert code == 1 and report["first_break"]["journal_id"] == 6
    assert report["first_break"]["kind"] == "hash_mismatch" and report["journals_checked"] == 5
    code, balances = cli(ledger_db, "check-balances", capsys=capsys)
    assert code == 1 and len(balances["mismatches"]) == 2


def test_verify_names_a_deleted_journal_and_a_moved_entry(
    ledger_db: LedgerDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """Journal 9 deleted: a gap at 9. Then an entry of journal 3 moved to another account: the first
    broken link is now journal 3."""
    seed(ledger_db, 4)
    tamper(ledger_db, "DELETE FROM entries WHERE journal_id = 9", "DELETE FROM journals WHERE id = 9")
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert code == 1 and (report["first_break"]["journal_id"], report["first_break"]["kind"]) == (9, "gap")
    tamper(
        ledger_db,
        "UPDATE entries SET account_id = (SELECT id FROM accounts WHERE code = 'psp_receivable')"
        " WHERE journal_id = 3 AND line_no = 1",
    )
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert code == 1 and (report["first_break"]["journal_id"], report["first_break"]["kind"]) == (
        3,
        "hash_mismatch",
    )


def test_verify_names_a_changed_currency_or_reference(
    ledger_db: LedgerDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry's currency column changed (behind the account's back), or a journal's reference."""
    seed(ledger_db, 2)
    tamper(ledger_db, "UPDATE journals SET reference = 'capture:forged' WHERE id = 5")
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert code == 1 and (report["first_break"]["journal_id"], report["first_break"]["kind"]) == (
        5,
        "hash_mismatch",
    )
    tamper(ledger_db, "UPDATE entries SET currency = 'USD' WHERE journal_id = 2 AND line_no = 2")
    code, report = cli(ledger_db, "verify", capsys=capsys)
    assert report["first_break"]["journal_id"] == 2
