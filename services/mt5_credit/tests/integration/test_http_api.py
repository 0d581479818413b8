"""The HTTP API as a real process over real HTTP: account mapping, deposit intents (ownership,
idempotency, card data, bad input) and merchant isolation."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from mt5_credit.testing import ADMIN, TOKEN_A, TOKEN_B, Client, answers, credit_database


@pytest.fixture
def api(stack: Stack, tmp_path: Path) -> Iterator[tuple[Client, str]]:
    with credit_database(stack.pg_admin_url) as url:
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "HTTP_PORT": str(port),
            "MT5_CREDIT_API_TOKENS": f"{TOKEN_A}=merchant-a,{TOKEN_B}=merchant-b",
            "MT5_CREDIT_ADMIN_TOKEN": ADMIN,
            "FX_RATES": "EUR:USD=1.0835",
            # withdrawals read MT5's free margin; nothing listens here (they are tested end to end)
            "MT5_WEBAPI_URL": "http://127.0.0.1:1",
            "MT5_MANAGER_LOGIN": "1000",
            "MT5_MANAGER_PASSWORD": "unused-here",
        }
        proc = Proc(["-m", "mt5_credit", "api"], env, tmp_path / "http.log")
        client = Client(f"http://127.0.0.1:{port}")
        wait_until(lambda: answers(client), timeout_s=20, what="mt5_credit http")
        try:
            yield client, url
        finally:
            proc.kill()


def _map(client: Client, login: int, customer: str, currency: str = "USD", enabled: bool = True) -> None:
    status, _ = client.call(
        "PUT",
        f"/accounts/{login}",
        {"customer_id": customer, "currency": currency, "enabled": enabled},
        token=ADMIN,
    )
    assert status == 200


def test_intent_only_for_the_customers_own_enabled_login(api: tuple[Client, str]) -> None:
    """A login that is not the customer's (or unknown) gives the same 422; disabled 422; own login 201."""
    client, _ = api
    _map(client, 5001, "cust-1")
    _map(client, 5002, "cust-2")
    _map(client, 5003, "cust-1", enabled=False)
    body = {"customer_id": "cust-1", "mt5_login": 5002, "amount_minor": 100, "currency": "USD"}
    assert (
        client.call("POST", "/deposit-intents", body, key="k-0000001")[1]["error"]["code"]
        == "login_not_owned"
    )
    body["mt5_login"] = 9999
    assert (
        client.call("POST", "/deposit-intents", body, key="k-0000002")[1]["error"]["code"]
        == "login_not_owned"
    )
    body["mt5_login"] = 5003
    assert (
        client.call("POST", "/deposit-intents", body, key="k-0000003")[1]["error"]["code"]
        == "account_disabled"
    )
    body["mt5_login"] = 5001
    status, created = client.call("POST", "/deposit-intents", body, key="k-0000004")
    assert status == 201 and created["deposit_reference"].startswith("dpi_")


def test_intent_idempotency_replays_and_detects_a_changed_request(api: tuple[Client, str]) -> None:
    """Same key + same body: the same intent (200); same key + another amount: 409; only one row stored."""
    client, url = api
    _map(client, 5001, "cust-1")
    body = {"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 100, "currency": "USD"}
    first = client.call("POST", "/deposit-intents", body, key="k-same-01")
    again = client.call("POST", "/deposit-intents", body, key="k-same-01")
    assert (first[0], again[0]) == (201, 200) and first[1] == again[1]
    changed = client.call("POST", "/deposit-intents", {**body, "amount_minor": 999}, key="k-same-01")
    assert changed[0] == 409 and changed[1]["error"]["code"] == "idempotency_key_reused"
    with connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM deposit_intents").fetchone() == (1,)


@pytest.mark.parametrize(
    ("raw", "key", "token", "status", "code"),
    [
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 1, "currency": "USD"}',
            None,
            TOKEN_A,
            400,
            "idempotency_key_required",
        ),
        (b"{not json", "k-bad-0001", TOKEN_A, 400, "malformed_json"),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 0, "currency": "USD"}',
            "k-bad-0002",
            TOKEN_A,
            400,
            "invalid_request",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": -5, "currency": "USD"}',
            "k-bad-0003",
            TOKEN_A,
            400,
            "invalid_request",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 5, "currency": "usd"}',
            "k-bad-0004",
            TOKEN_A,
            400,
            "invalid_request",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 5, "currency": "USD",'
            b' "card": "4242424242424242"}',
            "k-bad-0005",
            TOKEN_A,
            400,
            "card_data_forbidden",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 5, "currency": "USD", "x": 1}',
            "k-bad-0006",
            TOKEN_A,
            400,
            "unknown_fields",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 5, "currency": "GBP"}',
            "k-bad-0007",
            TOKEN_A,
            422,
            "no_fx_rate",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 5, "currency": "USD"}',
            "k-bad-0008",
            "wrong-token-000000000",
            401,
            "unauthorized",
        ),
    ],
)
def test_bad_intent_requests_get_a_clear_4xx_and_store_nothing(
    api: tuple[Client, str], raw: bytes, key: str | None, token: str, status: int, code: str
) -> None:
    """Missing key, malformed JSON, zero/negative amount, bad currency, card data, unknown fields,
    no FX rate, bad token: the documented 4xx code and no row."""
    client, url = api
    _map(client, 5001, "cust-1")
    got = client.call("POST", "/deposit-intents", raw=raw, key=key, token=token)
    assert (got[0], got[1]["error"]["code"]) == (status, code)
    with connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM deposit_intents").fetchone() == (0,)


def test_a_merchant_never_sees_another_merchants_intent(api: tuple[Client, str]) -> None:
    """Merchant B gets 404 for merchant A's intent (not 403: existence is not revealed)."""
    client, _ = api
    _map(client, 5001, "cust-1")
    body = {"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 100, "currency": "USD"}
    ref = client.call("POST", "/deposit-intents", body, key="k-iso-0001")[1]["deposit_reference"]
    assert client.call("GET", f"/deposit-intents/{ref}")[0] == 200
    assert client.call("GET", f"/deposit-intents/{ref}", token=TOKEN_B)[0] == 404
    assert (
        client.call("PUT", "/accounts/5009", {"customer_id": "c", "currency": "USD", "enabled": True})[0]
        == 401
    )


def test_the_api_has_no_way_to_credit(api: tuple[Client, str]) -> None:
    """No route takes a login or an amount to credit: a browser redirect or a caller cannot create a
    credit; credits come only from captured payment events."""
    client, url = api
    for method, path in (
        ("POST", "/credits"),
        ("POST", "/credits/1"),
        ("PUT", "/credits/1"),
        ("POST", "/deposit-intents/x/credit"),
    ):
        status, _ = client.call(method, path, {"mt5_login": 5001, "amount_minor": 1})
        assert status in (404, 405), (method, path, status)
    with connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM mt5_credits").fetchone() == (0,)
