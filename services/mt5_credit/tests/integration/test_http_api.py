"""The HTTP API as a real process over real HTTP: account mapping, deposit intents (ownership,
idempotency, card data, bad input) and merchant isolation."""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from backbone.tokens import token_hash
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.testing import ADMIN, TOKEN_A, TOKEN_B, Client, answers, credit_database, new_row

CONSOLE = "console-token-0123456789"  # acts for the operator it names (backbone.tokens)
STAFF = "staff-token-0123456789"  # a person's own token at this service: every merchant


@pytest.fixture
def api(stack: Stack, tmp_path: Path) -> Iterator[tuple[Client, str]]:
    with credit_database(stack.pg_admin_url) as url:
        port = free_port()
        operators = tmp_path / "operators"
        operators.write_text(
            f"console deposits:view,withdrawals:view,operators:assert sha256:{token_hash(CONSOLE)}\n"
            f"staff deposits:view sha256:{token_hash(STAFF)}\n"
            f"viewer withdrawals:view sha256:{token_hash('viewer-token-0123456789')}\n"
        )
        env = {
            "MT5_CREDIT_OPERATORS_FILE": str(operators),
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
            "invalid_amount",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": -5, "currency": "USD"}',
            "k-bad-0003",
            TOKEN_A,
            400,
            "invalid_amount",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": "100", "currency": "USD"}',
            "k-bad-0010",
            TOKEN_A,
            400,
            "invalid_amount",
        ),
        (
            b'{"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 9007199254740993,'
            b' "currency": "USD"}',
            "k-bad-0011",
            TOKEN_A,
            400,
            "amount_too_large",
        ),
        (b"[" * 5000 + b"]" * 5000, "k-bad-0012", TOKEN_A, 400, "body_too_deep"),
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
    """Missing key, malformed or too deeply nested JSON, an amount that is zero, negative, text or
    past the ceiling, bad currency, card data, unknown fields, no FX rate, bad token: the
    documented 4xx code and no row."""
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


def _as(operator: str, merchants: str, permissions: str = "deposits:view") -> dict[str, str]:
    return {"X-Operator": operator, "X-Operator-Permissions": permissions, "X-Operator-Merchants": merchants}


def test_an_operator_finds_the_deposits_on_a_login_of_their_merchants_only(api: tuple[Client, str]) -> None:
    """``GET /v1/deposits?mt5_login=`` (deposits:view) lists the login's deposits newest first with
    their credit rows (the payment each names): the console acting for an operator of merchant-a
    sees merchant-a's only, one of both merchants sees both, one of neither sees none, a person's
    own token sees every merchant; another login's deposits are never listed."""
    client, url = api
    _map(client, 5001, "cust-1")
    _map(client, 5002, "cust-1")
    body = {"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 100, "currency": "USD"}
    ref_a = client.call("POST", "/deposit-intents", body, key="k-login-a1")[1]["deposit_reference"]
    ref_b = client.call("POST", "/deposit-intents", body, key="k-login-b1", token=TOKEN_B)[1][
        "deposit_reference"
    ]
    client.call("POST", "/deposit-intents", {**body, "mt5_login": 5002}, key="k-login-a2")
    with connect(url, autocommit=True) as conn:
        PgCreditStore(conn).insert_row(
            new_row("payment:simpsp:pi_a", ref_a, 100),
            payment_id="pay_a",
            provider="simpsp",
            provider_payment_id="pi_a",
            source_reference=None,
        )
    status, found = client.call(
        "GET", "/v1/deposits?mt5_login=5001", token=CONSOLE, headers=_as("alice", "merchant-a")
    )
    assert status == 200 and found["mt5_login"] == 5001
    [deposit] = found["deposits"]
    assert (deposit["deposit_reference"], deposit["merchant_id"], deposit["amount_minor"]) == (
        ref_a,
        "merchant-a",
        100,
    )
    assert [(c["kind"], c["status"], c["payment_id"]) for c in deposit["credits"]] == [
        ("credit", "pending", "pay_a")
    ]
    both = client.call(
        "GET", "/v1/deposits?mt5_login=5001", token=CONSOLE, headers=_as("bob", "merchant-a,merchant-b")
    )
    assert [d["deposit_reference"] for d in both[1]["deposits"]] == [ref_b, ref_a]  # newest first
    assert both[1]["deposits"][0]["credits"] == []  # not captured yet
    none = client.call("GET", "/v1/deposits?mt5_login=5001", token=CONSOLE, headers=_as("eve", ""))
    assert none == (200, {"mt5_login": 5001, "deposits": []})
    staff = client.call("GET", "/v1/deposits?mt5_login=5001&limit=1", token=STAFF)
    assert [d["deposit_reference"] for d in staff[1]["deposits"]] == [ref_b]


def test_deposits_on_a_login_refuse_bad_queries_and_callers(api: tuple[Client, str]) -> None:
    """A missing, malformed or unknown parameter or too big a page is 400 invalid_request; a
    merchant's token, no operator token or an operator without deposits:view is 401/403; nothing
    is written either way."""
    client, url = api
    for query in ("", "?mt5_login=", "?mt5_login=abc", "?mt5_login=-1", "?mt5_login=0",
                  "?mt5_login=5001&limit=101", "?mt5_login=5001&merchant=merchant-b"):  # fmt: skip  # aligned
        status, answer = client.call("GET", f"/v1/deposits{query}", token=STAFF)
        assert (status, answer["error"]["code"]) == (400, "invalid_request"), query
    assert client.call("GET", "/v1/deposits?mt5_login=5001")[0] == 401  # a merchant's token
    assert client.call("GET", "/v1/deposits?mt5_login=5001", token="viewer-token-0123456789")[0] == 403
    no_view = _as("alice", "merchant-a", "withdrawals:view")
    assert client.call("GET", "/v1/deposits?mt5_login=5001", token=CONSOLE, headers=no_view)[0] == 403
    with connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM deposit_intents").fetchone() == (0,)


def _read(client: Client, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any], str | None]:
    """A GET with extra headers: the status, the JSON body ({} for a 304) and the ETag."""
    conn = http.client.HTTPConnection("127.0.0.1", int(client.base.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN_A}", **headers})
        answer = conn.getresponse()
        raw = answer.read()
        return answer.status, json.loads(raw) if raw else {}, answer.getheader("ETag")
    finally:
        conn.close()


def _post(
    client: Client, path: str, body: dict[str, Any], key: str
) -> tuple[int, dict[str, Any], str | None]:
    """A POST with an Idempotency-Key: the status, the JSON body and the ETag."""
    conn = http.client.HTTPConnection("127.0.0.1", int(client.base.rsplit(":", 1)[1]), timeout=30)
    try:
        headers = {"Authorization": f"Bearer {TOKEN_A}", "Idempotency-Key": key}
        conn.request(
            "POST", path, body=json.dumps(body), headers={**headers, "Content-Type": "application/json"}
        )
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read()), answer.getheader("ETag")
    finally:
        conn.close()


def test_a_new_intents_etag_lets_the_brokers_first_read_wait(api: tuple[Client, str]) -> None:
    """``POST /deposit-intents`` answers 201 with the ETag its status read carries (the intent with no
    credit yet), so the broker's very first read can wait: with that tag it is 304 at once, and held
    with ``Prefer: wait`` until a credit row appears. A replay of the create (200) carries no tag."""
    client, url = api
    _map(client, 5001, "cust-1")
    body = {"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 100, "currency": "USD"}
    status, created, tag = _post(client, "/deposit-intents", body, "k-tag-0001")
    assert status == 201 and tag
    path = f"/deposit-intents/{created['deposit_reference']}"
    status, intent, read_tag = _read(client, path, {})
    assert (status, intent["credits"], read_tag) == (200, [], tag)
    assert _read(client, path, {"If-None-Match": tag})[0] == 304
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_read, client, path, {"If-None-Match": tag, "Prefer": "wait=10"})
        time.sleep(0.5)
        assert not held.done(), "the read answered before anything changed"
        with connect(url, autocommit=True) as conn:
            PgCreditStore(conn).insert_row(
                new_row("payment:simpsp:pi_t", created["deposit_reference"], 100),
                payment_id="pay_t",
                provider="simpsp",
                provider_payment_id="pi_t",
                source_reference=None,
            )
        status, intent, _ = held.result(10)
    assert status == 200 and [c["status"] for c in intent["credits"]] == ["pending"]
    status, replayed, replay_tag = _post(client, "/deposit-intents", body, "k-tag-0001")
    assert (status, replayed, replay_tag) == (200, created, None)


def test_the_brokers_read_of_its_deposit_waits_for_its_credit(api: tuple[Client, str]) -> None:
    """``GET /deposit-intents/{ref}`` with its ETag in ``If-None-Match`` and ``Prefer: wait`` is held
    until a credit row of that intent appears (migration 0007's NOTIFY), then answers 200 with the
    row; a claim alone does not answer a wait (it ends in 304 with the same tag); the outcome
    ('unknown' here, as 'done' and 'failed') answers it at once."""
    client, url = api
    _map(client, 5001, "cust-1")
    body = {"customer_id": "cust-1", "mt5_login": 5001, "amount_minor": 100, "currency": "USD"}
    ref = client.call("POST", "/deposit-intents", body, key="k-wait-0001")[1]["deposit_reference"]
    path = f"/deposit-intents/{ref}"
    status, intent, tag = _read(client, path, {})
    assert status == 200 and intent["credits"] == [] and tag
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_read, client, path, {"If-None-Match": tag, "Prefer": "wait=10"})
        time.sleep(0.5)
        assert not held.done(), "the read answered before anything changed"
        started = time.monotonic()
        with connect(url, autocommit=True) as conn:
            PgCreditStore(conn).insert_row(
                new_row("payment:simpsp:pi_w", ref, 100),
                payment_id="pay_w",
                provider="simpsp",
                provider_payment_id="pi_w",
                source_reference=None,
            )
        status, intent, pending_tag = held.result(10)
    assert time.monotonic() - started < 3
    assert status == 200 and [c["status"] for c in intent["credits"]] == ["pending"]
    assert pending_tag and pending_tag != tag
    with connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE mt5_credits SET status = 'claimed', claim_token = gen_random_uuid(),"
            " lease_expires_at = now() + interval '1 minute' WHERE deposit_reference = %s",
            (ref,),
        )
    status, _, claimed_tag = _read(client, path, {})
    assert status == 200 and claimed_tag not in (None, pending_tag)
    started = time.monotonic()
    assert _read(client, path, {"If-None-Match": str(claimed_tag), "Prefer": "wait=1"})[0] == 304
    assert time.monotonic() - started >= 0.9
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_read, client, path, {"If-None-Match": str(claimed_tag), "Prefer": "wait=10"})
        time.sleep(0.5)
        started = time.monotonic()
        with connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE mt5_credits SET status = 'unknown', unknown_since = now()"
                " WHERE deposit_reference = %s",
                (ref,),
            )
        status, intent, _ = held.result(10)
    assert status == 200 and [c["status"] for c in intent["credits"]] == ["unknown"]
    assert time.monotonic() - started < 3
