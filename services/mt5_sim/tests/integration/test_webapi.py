"""The simulator as a real process on real PostgreSQL, spoken to in raw HTTP (no gateway client):
authentication and its answer window, sessions bound to connections, idle drop, the balance command's
rules and retcodes, deal queries and paging, the clock, malformed requests, the control API, health.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
from backbone.mt5.testing import (
    MANAGER_LOGIN,
    MANAGER_PASSWORD,
    ControlError,
    SimulatorProcess,
    running_simulator,
)
from backbone.testing.stack import Stack
from mt5_sim.domain.auth import password_hash, rand_answer

USD, JPY = "real\\usd", "real\\jpy"
LOGIN, OTHER, DISABLED, YEN = 7001, 7002, 7003, 7004
FAR = {"from": 0, "to": 32_503_680_000}


class Raw:
    """One keep-alive connection speaking the Web API by hand."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(self, path: str, **params: Any) -> dict[str, Any]:
        query = urlencode({k: str(v) for k, v in params.items()}, quote_via=quote)
        self.conn.request("GET", f"/api/{path}?{query}")
        response = self.conn.getresponse()
        body: dict[str, Any] = json.loads(response.read())
        return body

    def start(self) -> dict[str, Any]:
        return self.call("auth/start", version=484, agent="it", login=MANAGER_LOGIN, type="manager")

    def answer(self, srv_rand: str, password: str = MANAGER_PASSWORD) -> tuple[dict[str, Any], str]:
        cli_rand = os.urandom(16).hex()
        answer = self.call(
            "auth/answer", srv_rand_answer=rand_answer(password_hash(password), srv_rand), cli_rand=cli_rand
        )
        return answer, cli_rand

    def auth(self) -> Raw:
        answer, _ = self.answer(self.start()["srv_rand"])
        assert answer["retcode"] == "0 Done"
        return self

    def server_closed(self) -> bool:
        """True if the server ended the connection (``http.client`` would silently open a new one,
        so look at the socket instead of sending)."""
        sock = self.conn.sock
        if sock is None:
            return True  # the last answer said "Connection: close"
        readable, _, _ = select.select([sock], [], [], 1.0)
        return bool(readable) and sock.recv(1) == b""


@pytest.fixture(scope="module")
def sim(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    with running_simulator(
        stack.pg_admin_url, tmp_path_factory.mktemp("mt5sim"), MT5_SIM_AUTH_WINDOW_MS="400"
    ) as s:
        yield s


@pytest.fixture
def raw(sim: SimulatorProcess) -> Iterator[Raw]:
    sim.control.reset()
    sim.control.create_group(USD, "USD", 2)
    sim.control.create_group(JPY, "JPY", 0)
    sim.control.create_account(LOGIN, USD, balance="100.00")
    sim.control.create_account(OTHER, USD, balance="0")
    sim.control.create_account(DISABLED, USD, balance="50.00", enabled=False)
    sim.control.create_account(YEN, JPY, balance="1000")
    session = Raw(sim.port).auth()
    yield session
    session.conn.close()


def test_handshake_answers_and_session_is_the_connection(sim: SimulatorProcess) -> None:
    """auth/start gives a 32-hex srv_rand; a right answer authenticates and the server proves it knows
    the password (cli_rand_answer); commands before auth, or on another connection, answer 8."""
    first = Raw(sim.port)
    assert first.call("user/get", login=LOGIN) == {"retcode": "8 Not enough permissions"}
    start = first.start()
    assert start["retcode"] == "0 Done" and len(start["srv_rand"]) == 32
    answer, cli_rand = first.answer(start["srv_rand"])
    assert answer["retcode"] == "0 Done"
    assert answer["cli_rand_answer"] == rand_answer(password_hash(MANAGER_PASSWORD), cli_rand)
    assert first.call("test/access") == {"retcode": "0 Done"}
    assert Raw(sim.port).call("test/access") == {"retcode": "8 Not enough permissions"}


@pytest.mark.parametrize(
    ("params", "retcode"),
    [
        (
            {"version": 484, "agent": "it", "login": MANAGER_LOGIN, "type": "client"},
            "1000 Invalid terminal type",
        ),
        ({"version": 100, "agent": "it", "login": MANAGER_LOGIN, "type": "manager"}, "1010 Old version"),
        (
            {"version": 484, "agent": "with space", "login": MANAGER_LOGIN, "type": "manager"},
            "3 Invalid parameters",
        ),
    ],
)
def test_auth_start_refusals(sim: SimulatorProcess, params: dict[str, Any], retcode: str) -> None:
    """auth/start refuses a non-manager type, a version below 484 and an agent with spaces."""
    assert Raw(sim.port).call("auth/start", **params)["retcode"] == retcode


def test_failed_answers_close_the_connection(sim: SimulatorProcess) -> None:
    """A wrong password answers 3006, an answer without start answers 3; both close the connection."""
    wrong = Raw(sim.port)
    answer, _ = wrong.answer(wrong.start()["srv_rand"], password="not-it")
    assert answer["retcode"] == "3006 Invalid account password"
    assert wrong.server_closed()
    unstarted = Raw(sim.port)
    assert unstarted.call("auth/answer", srv_rand_answer="0" * 32, cli_rand="1" * 32)["retcode"].startswith(
        "3 "
    )
    assert unstarted.server_closed()


def test_answer_window(sim: SimulatorProcess) -> None:
    """An answer later than the window after start (400 ms here, 10 s by default) answers 9 and
    closes; a prompt answer on a new connection succeeds."""
    late = Raw(sim.port)
    srv_rand = late.start()["srv_rand"]
    time.sleep(0.6)
    answer, _ = late.answer(srv_rand)
    assert answer["retcode"] == "9 Operation timeout"
    assert late.server_closed()
    Raw(sim.port).auth()


def test_balance_deal_and_its_fields(sim: SimulatorProcess, raw: Raw) -> None:
    """A deposit creates one deal with Profit in the account's digits and the comment cut to 31
    characters; the balance moves by exactly that amount; tickets increase."""
    long_comment = "dep:" + "a" * 40
    first = raw.call("trade/balance", login=LOGIN, type=2, balance="25.5", comment=long_comment)
    second = raw.call("trade/balance", login=YEN, type=2, balance="1500", comment="dep:yen")
    assert first["retcode"] == second["retcode"] == "0 Done"
    ticket = int(first["answer"]["Ticket"])
    assert int(second["answer"]["Ticket"]) > ticket
    deal = raw.call("deal/get", ticket=ticket)["answer"]
    assert (deal["Login"], deal["Action"], deal["Profit"], deal["Comment"], deal["DigitsCurrency"]) == (
        str(LOGIN),
        "2",
        "25.50",
        long_comment[:31],
        "2",
    )
    assert raw.call("deal/get", ticket=int(second["answer"]["Ticket"]))["answer"]["Profit"] == "1500"
    state = raw.call("user/account/get", login=LOGIN)["answer"]
    assert (state["Balance"], state["CurrencyDigits"]) == ("125.50", "2")


@pytest.mark.parametrize(
    ("params", "retcode"),
    [
        ({"login": LOGIN, "type": 2, "balance": "-100.01"}, "10019 Not enough money"),
        ({"login": LOGIN, "type": 2, "balance": "1000000001"}, "4005 Money limit reached"),
        ({"login": LOGIN, "type": 8, "balance": "1"}, "3 Invalid parameters"),
        ({"login": LOGIN, "type": 2, "balance": "abc"}, "3 Invalid parameters"),
        ({"login": LOGIN, "type": 2}, "3 Invalid parameters"),
        ({"login": 9999, "type": 2, "balance": "1"}, "13 Not found"),
        ({"login": DISABLED, "type": 2, "balance": "1"}, "1002 Account disabled"),
    ],
)
def test_refused_balance_changes_nothing(
    sim: SimulatorProcess, raw: Raw, params: dict[str, Any], retcode: str
) -> None:
    """Every refused or malformed balance request answers its retcode and leaves balances and deals
    exactly as they were."""
    before = [sim.control.account(login)["balance"] for login in (LOGIN, DISABLED)]
    assert raw.call("trade/balance", **params)["retcode"] == retcode
    assert [sim.control.account(login)["balance"] for login in (LOGIN, DISABLED)] == before
    assert sim.control.deals() == []


def test_duplicate_parameter_is_malformed(sim: SimulatorProcess, raw: Raw) -> None:
    """A parameter given twice is ambiguous: 3, nothing applied."""
    raw.conn.request("GET", f"/api/trade/balance?login={LOGIN}&type=2&balance=1&balance=1000")
    assert json.loads(raw.conn.getresponse().read())["retcode"] == "3 Invalid parameters"
    assert sim.control.deals() == []


def test_concurrent_credits_are_exact(sim: SimulatorProcess, raw: Raw) -> None:
    """Credits to one account over several connections at once: every one is a deal with its own
    ticket and the balance is exactly the sum (one transaction per deal, no lost update)."""

    def credit(worker: int) -> None:
        session = Raw(sim.port).auth()
        for n in range(20):
            assert (
                session.call("trade/balance", login=LOGIN, type=2, balance="0.01", comment=f"c{worker}:{n}")[
                    "retcode"
                ]
                == "0 Done"
            )

    threads = [threading.Thread(target=credit, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    deals = sim.control.deals(login=LOGIN)
    assert len({d["Deal"] for d in deals}) == 60
    assert Decimal(sim.control.account(LOGIN)["balance"]) == Decimal("100.60")


def test_concurrent_withdrawals_never_overdraw(sim: SimulatorProcess, raw: Raw) -> None:
    """150 withdrawals of 1.00 race over three connections against a balance of 100.00: exactly 100
    are applied and 50 answer 10019; the balance ends at 0.00, never below (the lock and the rule
    see the latest committed balance, and the simulator's cross-check never fires)."""
    answers: list[str] = []

    def withdraw(worker: int) -> None:
        session = Raw(sim.port).auth()
        for n in range(50):
            answers.append(
                session.call("trade/balance", login=LOGIN, type=2, balance="-1", comment=f"w{worker}:{n}")[
                    "retcode"
                ]
            )

    threads = [threading.Thread(target=withdraw, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert (answers.count("0 Done"), answers.count("10019 Not enough money")) == (100, 50)
    assert sim.control.account(LOGIN)["balance"] == "0.00"
    assert len(sim.control.deals(login=LOGIN)) == 100


def test_deal_history_paging_and_batch(sim: SimulatorProcess, raw: Raw) -> None:
    """get_total counts a login's deals in [from, to] (both ends included); get_page pages at most
    100 at a time in ticket order; get_batch selects by login, group mask or ticket."""
    tickets = sim.control.add_deals(LOGIN, "1.00", "bulk:{n}", count=150, time_s=1_700_000_000)
    sim.control.add_deals(OTHER, "2.00", "other", time_s=1_700_000_001)
    window = {"login": LOGIN, "from": 1_700_000_000, "to": 1_700_000_000}
    assert raw.call("deal/get_total", **window)["answer"] == {"Total": "150"}
    assert raw.call("deal/get_total", login=LOGIN, **{"from": 1_700_000_001, "to": 1_800_000_000})[
        "answer"
    ] == {"Total": "0"}
    pages = [raw.call("deal/get_page", **window, offset=offset, total=100)["answer"] for offset in (0, 100)]
    assert [len(p) for p in pages] == [100, 50]
    assert [int(d["Deal"]) for d in pages[0] + pages[1]] == tickets
    assert raw.call("deal/get_page", **window, offset=0, total=101)["retcode"] == "3 Invalid parameters"
    assert (
        raw.call("deal/get_total", login=LOGIN, **{"from": 5, "to": 4})["retcode"] == "3 Invalid parameters"
    )
    assert len(raw.call("deal/get_batch", login=f"{LOGIN},{OTHER}", **FAR)["answer"]) == 151
    assert len(raw.call("deal/get_batch", group="real\\\\*,!real\\\\jpy", **FAR)["answer"]) == 151
    assert len(raw.call("deal/get_batch", group="real\\\\jpy", **FAR)["answer"]) == 0
    assert len(raw.call("deal/get_batch", ticket=f"{tickets[0]},{tickets[5]}")["answer"]) == 2
    assert raw.call("deal/get_batch", login=LOGIN)["retcode"] == "3 Invalid parameters"  # from/to required
    assert (
        raw.call("deal/get_batch", login=LOGIN, ticket=tickets[0], **FAR)["retcode"] == "3 Invalid parameters"
    )


def test_server_clock_and_offset(sim: SimulatorProcess, raw: Raw) -> None:
    """/api/time/server answers "<epoch> <yyyy.mm.dd hh:mm:ss>"; with an offset, both the server time
    and the Time of new deals move by it."""
    sim.control.set_clock_offset(86_400)
    server_s = int(raw.call("time/server")["answer"]["Time"].split(" ")[0])
    assert server_s - time.time() > 86_000
    ticket = raw.call("trade/balance", login=LOGIN, type=2, balance="1", comment="c")["answer"]["Ticket"]
    assert int(raw.call("deal/get", ticket=ticket)["answer"]["Time"]) - time.time() > 86_000


def test_user_and_group_objects(sim: SimulatorProcess, raw: Raw) -> None:
    """user/get carries Login, Group and Rights (enabled bit); group/get the currency and digits;
    unknown ones answer 13; an escaped group name is unescaped."""
    user = raw.call("user/get", login=DISABLED)["answer"]
    assert (user["Login"], user["Group"], int(user["Rights"]) & 1) == (str(DISABLED), USD, 0)
    group = raw.call("group/get", group="real\\\\jpy")["answer"]
    assert (group["Group"], group["Currency"], group["CurrencyDigits"]) == (JPY, "JPY", "0")
    assert raw.call("user/get", login=1)["retcode"] == "13 Not found"
    assert raw.call("group/get", group="nope")["retcode"] == "13 Not found"


def test_unknown_endpoint_method_and_quit(sim: SimulatorProcess, raw: Raw) -> None:
    """An unknown command is HTTP 404 with 12000; another method is 405; quit closes the session."""
    raw.conn.request("GET", "/api/user/delete?login=1")
    response = raw.conn.getresponse()
    assert (response.status, json.loads(response.read())["retcode"]) == (404, "12000 Not implemented")
    raw.conn.request("PUT", "/api/test/access")
    response = raw.conn.getresponse()
    assert response.status == 405
    response.read()
    assert raw.call("quit") == {"retcode": "0 Done"}
    assert raw.server_closed()


def test_control_api_refuses_bad_input_and_changes_nothing(sim: SimulatorProcess, raw: Raw) -> None:
    """Bad control requests answer 400/409 with a message and create nothing."""
    bad = [
        ("POST", "/control/groups", {"group": USD, "currency": "USD", "digits": 2}, "409"),
        ("POST", "/control/groups", {"group": "g", "currency": "usd"}, "400"),
        ("POST", "/control/accounts", {"login": 8001, "group": "nope"}, "400"),
        ("POST", "/control/accounts", {"login": 8001, "group": USD, "balance": "1.001"}, "400"),
        ("POST", "/control/accounts", {"login": 8001, "group": USD, "balance": 1.5}, "400"),
        ("POST", "/control/accounts", {"login": LOGIN, "group": USD}, "409"),
        ("POST", "/control/faults", {"kind": "nope"}, "400"),
        ("PUT", "/control/clock", {"offset_s": "1"}, "400"),
    ]
    for method, path, body, status in bad:
        with pytest.raises(ControlError, match=status):
            sim.control.request(method, path, body)
    assert raw.call("user/get", login=8001)["retcode"] == "13 Not found"
    assert sim.control.faults() == []


def test_health_and_metrics(sim: SimulatorProcess, raw: Raw) -> None:
    """The control port serves /healthz and /readyz (200 when the database and listener are up) and
    Prometheus metrics of the Web API."""
    raw.call("test/access")
    conn = http.client.HTTPConnection("127.0.0.1", sim.control_port, timeout=10)
    for path in ("/healthz", "/readyz"):
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert 'mt5_sim_requests_total{endpoint="test/access",outcome="0"}' in text


def test_idle_connections_are_dropped_and_sigterm_stops_cleanly(stack: Stack, tmp_path: Path) -> None:
    """A connection silent for the idle timeout (300 ms here, 180 s by default) is closed by the
    server; SIGTERM then stops the process with status 0 after it says so."""
    with running_simulator(stack.pg_admin_url, tmp_path, MT5_SIM_IDLE_TIMEOUT_MS="300") as short:
        session = Raw(short.port).auth()
        assert session.call("test/access") == {"retcode": "0 Done"}
        time.sleep(0.7)
        assert session.server_closed()
        assert short.terminate() == 0
        assert '"mt5_sim.stopped"' in short.logs()


def test_armed_faults_and_the_clock_survive_a_restart(stack: Stack, tmp_path: Path) -> None:
    """A drill that restarts the simulator still gets what it asked for: a fault armed for two
    calls fires once, the simulator is SIGKILLed and started again on its database, the fault fires
    once more (not twice: its count was kept) and then no more; the clock offset is kept too; a
    reset forgets both, also across a restart."""
    with running_simulator(stack.pg_admin_url, tmp_path) as sim:
        sim.control.create_group(USD, "USD", 2)
        sim.control.create_account(LOGIN, USD, balance="10.00")
        sim.control.arm_fault(kind="retcode", endpoint="trade/balance", retcode=10019, count=2)
        sim.control.set_clock_offset(3600)

        def balance(comment: str) -> str:
            session = Raw(sim.port).auth()
            try:
                return str(
                    session.call("trade/balance", login=LOGIN, type=2, balance="1.00", comment=comment)[
                        "retcode"
                    ]
                )
            finally:
                session.conn.close()

        assert balance("c1").startswith("10019")
        sim.kill()
        sim.start()
        [fault] = sim.control.faults()
        assert (fault["fired"], fault["count"]) == (1, 2)
        assert sim.control.request("GET", "/control/clock")["offset_s"] == 3600
        assert balance("c2").startswith("10019")
        assert balance("c3") == "0 Done"
        sim.control.reset()
        sim.kill()
        sim.start()
        assert sim.control.faults() == []
        assert sim.control.request("GET", "/control/clock")["offset_s"] == 0


def test_disarming_an_unknown_fault_is_404_and_saves_nothing(sim: SimulatorProcess) -> None:
    """``DELETE /control/faults/{id}`` of an id no fault has answers 404 and leaves the saved
    control state's row as it was: a refusal changes nothing."""

    def saved() -> list[tuple[Any, ...]]:
        with psycopg.connect(sim.db_url, autocommit=True) as conn:
            return conn.execute("SELECT * FROM mt5_control_state ORDER BY 1").fetchall()

    sim.control.request("DELETE", "/control/faults")  # a saved state to compare against
    before = saved()
    status, _ = _control_status(sim, "DELETE", "/control/faults/no-such-fault")
    assert status == 404
    assert saved() == before


def _control_status(sim: SimulatorProcess, method: str, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", sim.control_port, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def test_listing_deals_with_a_login_past_bigint_is_400(sim: SimulatorProcess) -> None:
    """``GET /control/deals`` with a login or limit that is no bigint (too long, or a superscript
    digit) is 400 naming the parameters, never a 500."""
    for query in ("login=94012724326579458961206868443136", "login=%C2%B9", "limit=%C2%B9"):
        status, body = _control_status(sim, "GET", f"/control/deals?{query}")
        assert status == 400 and "login must be a number" in body["error"], query
