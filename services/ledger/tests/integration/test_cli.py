"""The operator's command line on a real database: deploy (migrate + provision), settlement import
from a file, reversal, compensation, balance rebuild, and replaying a dead letter through the
ledger's own handler."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.inbox import DeadLetter, insert_dead_letter
from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing import stack as test_stack
from ledger.__main__ import main
from ledger.testing.database import TEST_APP_PASSWORD, TEST_APP_ROLE, LedgerDatabase, with_user
from ledger.testing.facts import deposit
from ledger.testing.posting import post_facts
from psycopg import errors


def cli(capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(list(args), env)
    lines = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(lines[-1]) if lines else {}


def test_deploy_migrates_as_owner_then_provisions_the_runtime_role(
    stack: test_stack.Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """On an empty database: migrate, provision (twice: idempotent), and the runtime role can post but
    not delete."""
    name = f"ledger_deploy_{uuid.uuid4().hex[:8]}"
    with connect(stack.pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = databases.database_url(stack.pg_admin_url, name)
    try:
        code, out = cli(capsys, {}, "migrate", "--url", url)
        assert code == 0 and "ledger/0001_ledger" in out["applied"]
        assert cli(capsys, {}, "migrate", "--url", url)[1] == {"applied": []}
        env = {"LEDGER_APP_PASSWORD": TEST_APP_PASSWORD}
        for _ in range(2):
            code, out = cli(
                capsys,
                env,
                "provision-role",
                "--admin-url",
                stack.pg_admin_url,
                "--database",
                name,
                "--role",
                TEST_APP_ROLE,
            )
            assert code == 0 and out["granted"] is True
        app_url = with_user(url, TEST_APP_ROLE, TEST_APP_PASSWORD)
        post_facts(app_url, deposit(1))
        with connect(app_url) as conn, pytest.raises(errors.InsufficientPrivilege):
            conn.execute("DELETE FROM entries")
        assert main(["provision-role", "--admin-url", stack.pg_admin_url], {}) == 2  # no password given
    finally:
        databases.drop_database(stack.pg_admin_url, url)


def test_settlement_reversal_compensation_and_rebuild_from_the_command_line(
    ledger_db: LedgerDatabase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Import a batch from a file (and again: already imported), reverse a capture, compensate a
    chargeback that MT5 could not take back, and prove the balances against the entries."""
    env = {"DATABASE_URL": ledger_db.app_url}
    post_facts(ledger_db.app_url, deposit(1, amount_minor=5000) + deposit(2, ending="charged_back")[:3])
    batch = tmp_path / "po_1.json"
    batch.write_text(
        json.dumps(
            {
                "format": "ledger.settlement.v1",
                "provider": "simpsp",
                "payout_batch_id": "po_1",
                "settlement_date": "2025-12-01",
                "currency": "EUR",
                "items": [
                    {
                        "type": "charge",
                        "gross_minor": 5000,
                        "fee_minor": 100,
                        "net_minor": 4900,
                        "currency": "EUR",
                        "our_reference": "op_cap_1",
                    }
                ],
            }
        )
    )
    code, out = cli(capsys, env, "import-settlement", str(batch), "--by", "finance")
    assert (code, out["outcome"]) == (0, "Imported")
    assert (
        cli(capsys, env, "import-settlement", str(batch), "--by", "finance")[1]["outcome"]
        == "AlreadyImported"
    )
    (tmp_path / "bad.json").write_text("{not json")
    assert cli(capsys, env, "import-settlement", str(tmp_path / "bad.json"), "--by", "x")[0] == 1

    code, out = cli(capsys, env, "reverse", "1", "--by", "alice", "--reason", "booked twice by mistake")
    assert (code, out["reference"]) == (0, "reversal:capture:op_cap_1")
    code, out = cli(capsys, env, "reverse", "1", "--by", "alice", "--reason", "again")
    assert (code, out["outcome"]) == (0, "AlreadyPosted")
    entries = json.dumps(
        [
            {"account": "chargeback_losses", "currency": "EUR", "direction": "debit", "amount_minor": 10_000},
            {
                "account": "client_deposits_pending",
                "currency": "EUR",
                "direction": "credit",
                "amount_minor": 10_000,
            },
        ]
    )
    chargeback = 5  # capture 1, credit 1, capture 2, credit 2, chargeback 2, then the settlement
    code, out = cli(
        capsys,
        env,
        "compensate",
        str(chargeback),
        "--key",
        "repair-1",
        "--entries",
        entries,
        "--by",
        "bob",
        "--reason",
        "client withdrew",
    )
    assert (code, out["reference"]) == (0, "compensation:repair-1")
    code, out = cli(
        capsys, env, "compensate", "5", "--key", "repair-2", "--entries", "[{}]", "--by", "b", "--reason", "r"
    )
    assert (code, out["outcome"]) == (1, "Rejected")

    code, out = cli(capsys, env, "rebuild-balances")
    assert (code, out["ok"], out["overwritten"]) == (0, True, False)
    code, out = cli(capsys, env, "verify")
    assert (code, out["journals_checked"]) == (0, 8)


def test_a_dead_letter_is_replayed_through_the_ledgers_handler(
    ledger_db: LedgerDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """A credit dead-lettered earlier (say, its currency was not enabled yet) is replayed by an operator:
    booked once, the dead letter resolved with who and why; a second replay changes nothing."""
    codec = AvroCodec(SchemaCatalogue.default())
    capture, credit = deposit(1)[:2]
    post_facts(ledger_db.app_url, [capture])
    letter = DeadLetter(
        "mt5.credit-events",
        0,
        7,
        credit.payment_id.encode(),
        credit.encode(codec),
        {},
        "handler_failed",
        "PostingRejected: currency not enabled",
        5,
        credit.event_id,
        credit.event_type,
    )
    with connect(ledger_db.app_url) as conn, conn.transaction():
        dead_letter_id = insert_dead_letter(conn, "ledger", letter, None)
    env = {"DATABASE_URL": ledger_db.app_url, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    code, out = cli(
        capsys, env, "dlq", "replay", str(dead_letter_id), "--by", "carol", "--reason", "EUR enabled"
    )
    assert (code, out["outcome"], out["applied"]) == (0, "Replayed", True)
    with connect(ledger_db.admin_url) as conn:
        assert conn.execute("SELECT reference FROM journals ORDER BY id").fetchall() == [
            ("capture:op_cap_1",),
            ("mt5-credit:2",),
        ]
        assert conn.execute("SELECT resolved_by FROM dead_letters").fetchall() == [("carol",)]
    code, out = cli(capsys, env, "dlq", "replay", str(dead_letter_id), "--by", "carol", "--reason", "again")
    assert (code, out["outcome"]) == (1, "AlreadyResolved")
