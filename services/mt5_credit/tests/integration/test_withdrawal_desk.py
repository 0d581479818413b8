"""The withdrawal desk on real PostgreSQL, reading free margin from the real MT5 simulator over its
Web API (docs/adr/0008): holds, idempotency, every refusal storing nothing, two requests racing on
one free margin, and maker-checker with single-use approval bound to the exact withdrawal."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backbone.mt5 import TradeStateResult
from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess, running_simulator
from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from backbone.tokens import token_hash
from mt5_credit.adapters.mt5 import GatewayMt5
from mt5_credit.adapters.pg_withdrawals import Accepted, DeskConfig, PgWithdrawalDesk, TradeStatePort
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.bootstrap import outbox_writer
from mt5_credit.domain.intake import Account, DepositIntent, NewRow
from mt5_credit.domain.model import CreditKind
from mt5_credit.domain.withdrawals import Refusal, WithdrawalRequest
from mt5_credit.testing import Client, answers, credit_database

pytestmark = pytest.mark.integration
GROUP = "real\\usd"
LOGIN, OTHER_LOGIN, DISABLED_LOGIN = 7001, 7002, 7003
CARD = "pm_card_visa"
CONFIG = DeskConfig(approval_above_minor=0, margin_level_floor_pct=Decimal(100))
CONSOLE = "console-token-0123456789"  # acts for the operator it names (backbone.tokens)
STAFF = "staff-token-0123456789"  # a person's own token: no merchant scope


@pytest.fixture(scope="module")
def sim(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    with running_simulator(stack.pg_admin_url, tmp_path_factory.mktemp("mt5")) as sim:
        sim.control.create_group(GROUP, "USD", 2)
        yield sim


@pytest.fixture(scope="module")
def mt5(sim: SimulatorProcess) -> Iterator[GatewayMt5]:
    gateway = GatewayMt5.from_settings(sim.gateway_settings())
    yield gateway
    gateway.close()


_next_login = iter(range(7100, 7999))


@pytest.fixture
def world(stack: Stack, sim: SimulatorProcess) -> Iterator[tuple[str, int]]:
    """A fresh database with cust-1's login (100.00 USD on MT5, a credited deposit paid with CARD),
    another customer's login and a disabled one; yields (database url, cust-1's login)."""
    login = next(_next_login)
    with credit_database(stack.pg_admin_url) as url, connect(url, autocommit=True) as conn:
        sim.control.create_account(login, GROUP, balance="100.00")
        store = PgCreditStore(conn)
        store.upsert_account(Account(login, "cust-1", "USD", True))
        store.upsert_account(Account(OTHER_LOGIN, "cust-2", "USD", True))
        store.upsert_account(Account(DISABLED_LOGIN, "cust-1", "USD", False))
        store.insert_intent(DepositIntent("dpi_1", "m1", "cust-1", login, 10_000, "USD"), "key-dpi-1", "d")
        credit_id = store.insert_row(
            NewRow(CreditKind.CREDIT, "payment:simpsp:pi_1", "dpi_1", login, "cust-1", 10_000, "USD", 10_000,
                   "USD", None, payment_method_token=CARD),
            payment_id="pay_1", provider="simpsp", provider_payment_id="pi_1", source_reference=None,
        )  # fmt: skip  # packed: a few items a line read better than one each
        conn.execute(
            "UPDATE mt5_credits SET status = 'done', mt5_deal_ticket = 1 WHERE id = %s", (credit_id,)
        )
        yield url, login


def _desk(conn: Any, mt5: TradeStatePort, config: DeskConfig = CONFIG) -> PgWithdrawalDesk:
    return PgWithdrawalDesk(conn, outbox_writer(), mt5, config)


def _req(login: int, amount_minor: int = 4_000, **changes: Any) -> WithdrawalRequest:
    return replace(WithdrawalRequest("m1", "cust-1", login, amount_minor, "USD", CARD), **changes)


def _count(conn: Any, table: str = "withdrawals") -> int:
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0])


def test_a_request_is_held_and_replayed_by_its_key(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """Checked and held (held_minor shows it); the same key and request replays the same withdrawal;
    the same key with another amount is a 409 and stores nothing."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        desk = _desk(conn, mt5)
        first = desk.request(_req(login), "key-00000001")
        assert isinstance(first, Accepted) and not first.replayed
        assert (first.view["status"], first.view["held_minor"]) == ("held", 4_000)
        again = desk.request(_req(login), "key-00000001")
        assert isinstance(again, Accepted) and again.replayed
        assert again.view["withdrawal_id"] == first.view["withdrawal_id"]
        other = desk.request(_req(login, 4_001), "key-00000001")
        assert isinstance(other, Refusal) and (other.status, other.code) == (409, "idempotency_key_reused")
        assert _count(conn) == 1 and desk.held_minor(login) == 4_000


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"mt5_login": OTHER_LOGIN}, "login_not_customers"),
        ({"mt5_login": 999_999}, "login_not_customers"),
        ({"mt5_login": DISABLED_LOGIN}, "account_disabled"),
        ({"currency": "EUR"}, "currency_mismatch"),
        ({"destination_token": "pm_card_never_used"}, "unknown_destination"),
        ({"customer_id": "cust-2"}, "login_not_customers"),
        ({"amount_minor": 10_001}, "insufficient_free_margin"),
    ],
)
def test_bad_requests_are_refused_and_hold_nothing(
    world: tuple[str, int], mt5: GatewayMt5, changes: dict[str, Any], code: str
) -> None:
    """Another client's login, an unknown or disabled one, another currency, a card the client never
    paid with, more than the free margin: a clear 422 and nothing stored, nothing held."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        refused = _desk(conn, mt5).request(_req(login, **changes), "key-bad-00001")
        assert isinstance(refused, Refusal) and (refused.status, refused.code) == (422, code), refused
        assert _count(conn) == 0 and _count(conn, "mt5_credits") == 1


def test_mt5_without_an_answer_refuses_with_503(world: tuple[str, int], sim: SimulatorProcess) -> None:
    """MT5 unreachable: 503 and nothing held (no answer is never "enough margin")."""
    url, login = world
    dead = GatewayMt5.from_settings(replace(sim.gateway_settings(), url="http://127.0.0.1:1"))
    try:
        with connect(url, autocommit=True) as conn:
            refused = _desk(conn, dead).request(_req(login), "key-dead-0001")
            assert isinstance(refused, Refusal) and (refused.status, refused.code) == (503, "mt5_unavailable")
            assert _count(conn) == 0
    finally:
        dead.close()


def test_two_requests_racing_on_one_free_margin_hold_it_once(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """100.00 free, two requests of 60.00 at once (their own connections): the account's row lock
    makes the second see the first's hold; one is held, the other refused."""
    url, login = world
    results: list[Accepted | Refusal] = []
    barrier = threading.Barrier(2)

    def ask(key: str) -> None:
        with connect(url, autocommit=True) as conn:
            barrier.wait()
            results.append(_desk(conn, mt5).request(_req(login, 6_000), key))

    threads = [threading.Thread(target=ask, args=(f"key-race-000{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(r).__name__ for r in results) == ["Accepted", "Refusal"]
    refused = next(r for r in results if isinstance(r, Refusal))
    assert refused.code == "insufficient_free_margin"


class _HeldMt5:
    """The real MT5 gateway, but each trade-state read waits for ``release`` (a slow MT5)."""

    def __init__(self, real: GatewayMt5) -> None:
        self.real, self.entered, self.release = real, threading.Event(), threading.Event()

    def trade_state(self, login: int) -> TradeStateResult:
        self.entered.set()
        assert self.release.wait(20), "the test never released MT5"
        return self.real.trade_state(login)


def test_a_request_waiting_on_mt5_blocks_no_deposit_intent_of_its_login(
    world: tuple[str, int], mt5: GatewayMt5
) -> None:
    """A withdrawal request reads MT5's margin while it holds its login's account row. Meanwhile a
    deposit intent for that login is created at once: its foreign-key check is not blocked, because
    the request locks ``FOR NO KEY UPDATE``. A second withdrawal request of that login still waits for
    the first, so the lock still serializes requests. (With ``FOR UPDATE`` the intent waited for MT5.)"""
    url, login = world
    slow = _HeldMt5(mt5)

    def first() -> Accepted | Refusal:
        with connect(url, autocommit=True) as conn:
            return _desk(conn, slow).request(_req(login), "key-slow-0001")

    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(first)
        try:
            assert slow.entered.wait(10), "the first request never read MT5"
            with connect(url, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '2s'")
                intent = DepositIntent("dpi_2", "m1", "cust-1", login, 500, "USD")
                assert PgCreditStore(conn).insert_intent(intent, "key-dpi-2", "d") is None
                with pytest.raises(psycopg.errors.LockNotAvailable), conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '300ms'")
                    _desk(conn, mt5).request(_req(login, 1_000), "key-slow-0002")
        finally:
            slow.release.set()
        assert isinstance(done.result(20), Accepted)
    with connect(url, autocommit=True) as conn:
        assert _count(conn) == 1 and _count(conn, "deposit_intents") == 2


def test_maker_checker_single_use_and_bound_to_the_digest(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """Prepared by alice: alice cannot approve (403), bob with another digest cannot (409); bob with
    the digest approves, which inserts the one debit row (wdr:<id>); a second approval is a 409.
    Refused acts are in the audit trail too."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        desk = _desk(conn, mt5)
        accepted = desk.request(_req(login), "key-mc-000001")
        assert isinstance(accepted, Accepted)
        wid = accepted.view["withdrawal_id"]
        prepared = desk.prepare(wid, "alice", "checked the client's history")
        assert isinstance(prepared, dict) and prepared["status"] == "prepared"
        digest = prepared["command_digest"]
        same = desk.approve(wid, "alice", digest, "me again")
        assert isinstance(same, Refusal) and (same.status, same.code) == (403, "same_person")
        wrong = desk.approve(wid, "bob", "0" * 64, "looks fine")
        assert isinstance(wrong, Refusal) and wrong.code == "digest_mismatch"
        approved = desk.approve(wid, "bob", digest, "second pair of eyes")
        assert isinstance(approved, dict) and approved["status"] == "approved"
        assert approved["debit"]["comment"] == f"wdr:{approved['debit']['credit_id']}"
        assert approved["held_minor"] == 4_000  # held until MT5 debits it
        twice = desk.approve(wid, "carol", digest, "me too")
        assert isinstance(twice, Refusal) and twice.code == "not_prepared"
        assert _count(conn, "mt5_credits") == 2
        trail = [(a["actor"], a["action"], a["outcome"]) for a in approved["audit"]]
        assert trail == [
            ("merchant:m1", "request", "done"),
            ("alice", "prepare", "done"),
            ("alice", "approve", "refused"),
            ("bob", "approve", "refused"),
            ("bob", "approve", "done"),
        ]


def test_two_approvals_racing_one_wins(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """bob and carol approve the same prepared withdrawal at once: one approval, one debit row."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        desk = _desk(conn, mt5)
        accepted = desk.request(_req(login), "key-race-appr1")
        assert isinstance(accepted, Accepted)
        wid = accepted.view["withdrawal_id"]
        prepared = desk.prepare(wid, "alice", "checked")
        assert isinstance(prepared, dict)
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def approve(who: str) -> None:
        with connect(url, autocommit=True) as conn:
            barrier.wait()
            results.append(_desk(conn, mt5).approve(wid, who, prepared["command_digest"], "ok"))

    threads = [threading.Thread(target=approve, args=(who,)) for who in ("bob", "carol")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(r).__name__ for r in results) == ["Refusal", "dict"]
    with connect(url, autocommit=True) as conn:
        assert _count(conn, "mt5_credits") == 2


def test_below_the_threshold_no_second_person_is_asked(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """With approvals above 50.00 only, a 40.00 withdrawal is approved at once (approved_by auto)
    and its debit row exists; rejecting it is then refused (money may already move)."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        desk = _desk(conn, mt5, replace(CONFIG, approval_above_minor=5_000))
        accepted = desk.request(_req(login), "key-auto-0001")
        assert isinstance(accepted, Accepted)
        assert (accepted.view["status"], accepted.view["approved_by"]) == ("approved", "auto")
        assert accepted.view["debit"] is not None
        late = desk.reject(accepted.view["withdrawal_id"], "alice", "changed my mind")
        assert isinstance(late, Refusal) and late.code == "not_rejectable"


def test_rejected_before_approval_releases_the_hold(world: tuple[str, int], mt5: GatewayMt5) -> None:
    """A rejected withdrawal holds nothing and can no longer be prepared."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        desk = _desk(conn, mt5)
        accepted = desk.request(_req(login), "key-rej-00001")
        assert isinstance(accepted, Accepted)
        wid = accepted.view["withdrawal_id"]
        rejected = desk.reject(wid, "alice", "client asked to cancel")
        assert isinstance(rejected, dict) and rejected["status"] == "rejected"
        assert desk.held_minor(login) == 0
        assert isinstance(desk.prepare(wid, "bob", "late"), Refusal)


def test_operators_see_and_act_on_their_merchants_withdrawals_only(
    world: tuple[str, int], mt5: GatewayMt5, sim: SimulatorProcess, tmp_path: Path
) -> None:
    """Over the API as a real process, the console acting for an operator of merchant m1 lists,
    reads and prepares m1's withdrawal; for an operator of another merchant the same withdrawal is
    not listed, not found (404) and cannot be prepared (404, nothing changes); a person's own token
    (no merchant named) sees every merchant's, as before."""
    url, login = world
    with connect(url, autocommit=True) as conn:
        accepted = _desk(conn, mt5).request(_req(login), "key-scope-0001")
        assert isinstance(accepted, Accepted)
    wid = accepted.view["withdrawal_id"]
    operators = tmp_path / "operators"
    operators.write_text(
        f"console withdrawals:view,withdrawals:prepare,operators:assert sha256:{token_hash(CONSOLE)}\n"
        f"staff withdrawals:view sha256:{token_hash(STAFF)}\n"
    )
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "HTTP_PORT": str(port),
        "MT5_CREDIT_API_TOKENS": "merchant-token-0123456789=m1",
        "MT5_CREDIT_ADMIN_TOKEN": "admin-token-0123456789",
        "MT5_CREDIT_OPERATORS_FILE": str(operators),
        "MT5_WEBAPI_URL": sim.url,
        "MT5_MANAGER_LOGIN": str(MANAGER_LOGIN),
        "MT5_MANAGER_PASSWORD": MANAGER_PASSWORD,
    }
    proc = Proc(["-m", "mt5_credit", "api"], env, tmp_path / "api.log")
    client = Client(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: answers(client), timeout_s=20, what="mt5_credit api")
        mine, theirs = _acting("alice", "m1"), _acting("eve", "m2")
        assert [
            w["withdrawal_id"]
            for w in client.call("GET", "/v1/withdrawals", token=CONSOLE, headers=mine)[1]["withdrawals"]
        ] == [wid]
        assert client.call("GET", "/v1/withdrawals", token=CONSOLE, headers=theirs) == (
            200,
            {"withdrawals": []},
        )
        assert client.call("GET", f"/v1/withdrawals/{wid}", token=CONSOLE, headers=theirs)[0] == 404
        assert (
            client.call("GET", f"/v1/withdrawals/{wid}", token=CONSOLE, headers=mine)[1]["merchant_id"]
            == "m1"
        )
        refused = client.call(
            "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "x"}, token=CONSOLE, headers=theirs
        )
        assert refused[0] == 404
        with connect(url, autocommit=True) as conn:
            assert conn.execute(
                "SELECT status FROM withdrawals WHERE withdrawal_id = %s", (wid,)
            ).fetchone() == ("held",)
        done = client.call(
            "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "checked"}, token=CONSOLE, headers=mine
        )
        assert done[0] == 200 and done[1]["prepared_by"] == "alice"
        assert [
            w["withdrawal_id"] for w in client.call("GET", "/v1/withdrawals", token=STAFF)[1]["withdrawals"]
        ] == [wid]
    finally:
        proc.kill()


def _acting(operator: str, merchants: str) -> dict[str, str]:
    return {
        "X-Operator": operator,
        "X-Operator-Permissions": "withdrawals:view,withdrawals:prepare",
        "X-Operator-Merchants": merchants,
    }
