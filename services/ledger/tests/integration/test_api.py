"""The HTTP API as a real process (port from the environment): bearer tokens with permissions,
balances now and as of a time, journals by reference and payment, entries with paging, the
settlement import, and clear 4xx answers to bad requests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backbone.postgres import connect
from backbone.testing import stack as test_stack
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port
from ledger.entrypoints.auth import token_hash
from ledger.testing.database import LedgerDatabase
from ledger.testing.facts import deposit
from ledger.testing.posting import post_facts

READER, IMPORTER = "reader-token", "importer-token"


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(
        self, path: str, token: str | None = READER, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        request.add_header("Content-Type", "application/json")  # as every client of the API sends it
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            payload = error.read()
            return error.code, json.loads(payload) if payload.startswith(b"{") else {}


@pytest.fixture
def api(stack: test_stack.Stack, ledger_db: LedgerDatabase, tmp_path: Path) -> Iterator[Api]:
    tokens = tmp_path / "tokens"
    tokens.write_text(
        f"viewer ledger:read sha256:{token_hash(READER)}\n"
        f"recon ledger:read,ledger:import sha256:{token_hash(IMPORTER)}\n"
    )
    port = free_port()
    env = {
        "DATABASE_URL": ledger_db.app_url,
        "LEDGER_HTTP_PORT": str(port),
        "LEDGER_HTTP_HOST": "127.0.0.1",
        "LEDGER_API_TOKENS_FILE": str(tokens),
        "LEDGER_PAGE_SIZE_MAX": "50",
        "LEDGER_HTTP_BODY_MAX_BYTES": "20000",
    }
    proc = Proc(["-m", "ledger", "api"], env, tmp_path / "api.log")
    client = Api(port)

    def up() -> bool:
        try:
            return client.call("/readyz", token=None)[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, 30, "the API answering", alive=lambda: proc.popen.poll() is None)
        yield client
    finally:
        assert proc.terminate() == 0  # SIGTERM: a clean exit


def test_every_route_needs_a_token_with_the_right_permission(api: Api) -> None:
    """No token or an unknown one: 401. A read-only token cannot import: 403. Probes stay open."""
    assert api.call("/v1/journals/1", token=None)[0] == 401
    assert api.call("/v1/journals/1", token="guess")[0] == 401
    status, body = api.call("/v1/settlements", token=READER, body={})
    assert (status, body["error"]) == (403, "forbidden")
    assert api.call("/healthz", token=None)[0] == 200
    assert api.call("/v1/journals/1", token=IMPORTER)[0] == 404  # the importer may read too


def test_balances_now_and_as_of_a_time(api: Api, ledger_db: LedgerDatabase) -> None:
    """Balance of an account, of all holders of a per-holder code, of one holder; as of a time before
    the second batch the second batch is not in it; before everything it is zero."""
    post_facts(ledger_db.app_url, deposit(1, amount_minor=1000, login=5))
    with connect(ledger_db.admin_url) as conn:
        first_batch_at: datetime = conn.execute("SELECT max(posted_at) FROM journals").fetchone()[0]  # type: ignore[index]
    time.sleep(0.01)
    post_facts(ledger_db.app_url, deposit(2, amount_minor=250, login=6))
    status, body = api.call("/v1/accounts/psp_receivable/EUR/balance")
    assert (status, body["balance_minor"], body["account_type"]) == (200, 1250, "asset")
    assert api.call("/v1/accounts/client_mt5_balances/EUR/balance")[1]["balance_minor"] == 1250
    one = api.call("/v1/accounts/client_mt5_balances/EUR/balance?holder=mt5:6")[1]
    assert (one["balance_minor"], one["accounts"]) == (250, 1)
    as_of = first_batch_at.isoformat().replace("+00:00", "Z")
    then = api.call(f"/v1/accounts/psp_receivable/EUR/balance?as_of={urllib.parse.quote(as_of)}")[1]
    assert (then["balance_minor"], then["last_journal_id"]) == (1000, 2)
    before = (first_batch_at - timedelta(days=1)).isoformat()
    assert (
        api.call(f"/v1/accounts/psp_receivable/EUR/balance?as_of={urllib.parse.quote(before)}")[1][
            "balance_minor"
        ]
        == 0
    )
    assert api.call("/v1/accounts/bank_cash/EUR/balance")[1] == {
        **api.call("/v1/accounts/bank_cash/EUR/balance")[1],
        "balance_minor": 0,
        "accounts": 0,
    }


def test_journals_by_reference_payment_and_id_and_entries_with_paging(
    api: Api, ledger_db: LedgerDatabase
) -> None:
    """A journal by its reference (with its entries), all journals of a payment, one by id; an account's
    entries page by page with a cursor, nothing missed or repeated."""
    post_facts(
        ledger_db.app_url,
        [f for n in range(1, 8) for f in deposit(n, amount_minor=100 * n, ending="refunded")],
    )
    status, body = api.call("/v1/journals?reference=capture:op_cap_3")
    assert status == 200 and len(body["journals"]) == 1
    journal = body["journals"][0]
    assert journal["payment_id"] == "pay_3" and [e["account"] for e in journal["entries"]] == [
        "psp_receivable",
        "client_deposits_pending",
    ]
    by_payment = api.call("/v1/journals?payment_id=pay_3")[1]["journals"]
    assert [j["reference"] for j in by_payment] == [
        "capture:op_cap_3",
        "mt5-credit:4",
        "refund:rf_3",
        "mt5-debit:4",
    ]
    assert api.call(f"/v1/journals/{journal['journal_id']}")[1]["reference"] == "capture:op_cap_3"
    seen, after = [], "0.0"
    for _ in range(10):
        page = api.call(f"/v1/accounts/psp_receivable/EUR/entries?limit=3&after={after}")[1]
        seen += [(e["journal_id"], e["line"]) for e in page["entries"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert len(seen) == len(set(seen)) == 14  # 7 captures + 7 refunds
    client = api.call("/v1/accounts/client_mt5_balances/EUR/entries?holder=mt5:700003")[1]["entries"]
    assert [(e["direction"], e["amount_minor"]) for e in client] == [("credit", 300), ("debit", 300)]


def test_bad_requests_get_a_clear_4xx(api: Api) -> None:
    """Unknown account code 404, lower-case currency 400, limit out of range 400, as_of without a zone
    400, both reference and payment_id 400, missing journal 404."""
    cases = {
        "/v1/accounts/cash/EUR/balance": 404,
        "/v1/accounts/psp_receivable/eur/balance": 400,
        "/v1/accounts/psp_receivable/EUR/entries?limit=0": 400,
        "/v1/accounts/psp_receivable/EUR/entries?limit=51": 400,
        "/v1/accounts/client_mt5_balances/EUR/entries": 400,  # a per-holder code needs its holder
        "/v1/accounts/psp_receivable/EUR/balance?as_of=2025-12-01T00:00:00": 400,
        "/v1/journals?reference=a:1&payment_id=p": 400,
        "/v1/journals/999": 404,
        "/v1/journals/abc": 400,
    }
    for path, expected in cases.items():
        status, body = api.call(path)
        assert status == expected, (path, status, body)
        assert body.get("error"), path


def test_settlement_import_over_http(api: Api, ledger_db: LedgerDatabase) -> None:
    """Imported (201), the same again (200, same journal), other amounts (409), malformed (422), not
    JSON (400), too large (413); the importer's principal is recorded on the journal."""
    post_facts(ledger_db.app_url, deposit(1, amount_minor=1000))
    batch = {
        "format": "ledger.settlement.v1",
        "provider": "simpsp",
        "payout_batch_id": "po_9",
        "settlement_date": "2025-12-01",
        "currency": "EUR",
        "items": [
            {
                "type": "charge",
                "gross_minor": 1000,
                "fee_minor": 30,
                "net_minor": 970,
                "currency": "EUR",
                "our_reference": "op_cap_1",
            }
        ],
    }
    status, body = api.call("/v1/settlements", token=IMPORTER, body=batch)
    assert (status, body["outcome"]) == (201, "imported")
    again = api.call("/v1/settlements", token=IMPORTER, body=batch)
    assert again == (200, {**body, "outcome": "already_imported"})
    changed = {**batch, "items": [{**batch["items"][0], "fee_minor": 31, "net_minor": 969}]}  # type: ignore[dict-item]
    assert api.call("/v1/settlements", token=IMPORTER, body=changed)[0] == 409
    status, body = api.call("/v1/settlements", token=IMPORTER, body={**batch, "currency": "ZZZ"})
    assert (status, body["outcome"]) == (422, "rejected")
    assert api.call("/v1/settlements", token=IMPORTER, raw=b"not json")[0] == 400
    assert api.call("/v1/settlements", token=IMPORTER, raw=b"{" + b" " * 30_000 + b"}")[0] == 413
    assert api.call("/v1/accounts/bank_cash/EUR/balance")[1]["balance_minor"] == 970
    journal = api.call("/v1/journals?reference=settlement:simpsp:po_9")[1]["journals"][0]
    assert journal["source"]["type"] == "settlement" and journal["source"]["detail"]["imported_by"] == "recon"


def test_negative_balance_gauge_counts_accounts_below_zero(api: Api, ledger_db: LedgerDatabase) -> None:
    """/metrics exports ledger_negative_balance_accounts for every account code, 0 while the books
    are healthy, and it rises to 1 for a code when one of its accounts goes below zero (the P0
    alert LedgerNegativeBalance reads it)."""
    post_facts(ledger_db.app_url, deposit(1, amount_minor=1000, login=5))

    def gauge(code: str) -> str:
        with urllib.request.urlopen(api.base + "/metrics", timeout=5) as response:
            text = response.read().decode()
        return next(
            line
            for line in text.splitlines()
            if line.startswith(f'ledger_negative_balance_accounts{{code="{code}"}}')
        )

    wait_until(lambda: gauge("psp_receivable").endswith(" 0.0"), 30, "gauge exported")
    with connect(ledger_db.admin_url) as conn:
        conn.execute(
            "UPDATE balances SET balance_minor = -5 FROM accounts a"
            " WHERE a.id = balances.account_id AND a.code = 'psp_receivable'"
        )
    wait_until(lambda: gauge("psp_receivable").endswith(" 1.0"), 30, "negative balance counted")
    assert gauge("client_mt5_balances").endswith(" 0.0")
