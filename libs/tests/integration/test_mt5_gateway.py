"""The MT5 gateway (backbone.mt5) against the simulator as a real process on real PostgreSQL, over
real HTTP: every injected fault and what the gateway makes of it.

The rule under test: a balance call is Applied only when MT5 answered Done and the deal read back is
ours; Refused only for a retcode that means "not applied"; everything else is NoAnswer, and the
lookup that follows tells what really happened (Found / Absent / Conflict), never guessing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
from backbone.mt5 import (
    Absent,
    AccountInfo,
    Applied,
    Conflict,
    DealType,
    Found,
    Mt5Gateway,
    NoAnswer,
    Refused,
    ServerTime,
)
from backbone.mt5.testing import SimulatorProcess, running_simulator
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from prometheus_client import REGISTRY

USD, USD0 = "real\\usd", "real\\usd0"
LOGIN, OTHER, DISABLED, WHOLE = 7001, 7002, 7003, 7004
CALL_MS = 600  # the gateway's read timeout in these tests
HANG_MS = 1_500  # how long a hanging fault holds a request (past CALL_MS)
BAL = DealType.BALANCE


@pytest.fixture(scope="module")
def sim(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    with running_simulator(stack.pg_admin_url, tmp_path_factory.mktemp("mt5gw")) as s:
        yield s


@pytest.fixture
def mt5(sim: SimulatorProcess) -> Iterator[Mt5Gateway]:
    sim.control.reset()
    sim.control.create_group(USD, "USD", 2)
    sim.control.create_group(USD0, "USD", 0)
    sim.control.create_account(LOGIN, USD, balance="0")
    sim.control.create_account(OTHER, USD, balance="0")
    sim.control.create_account(DISABLED, USD, balance="0", enabled=False)
    sim.control.create_account(WHOLE, USD0, balance="0")
    with Mt5Gateway(sim.gateway_settings(call_timeout_ms=CALL_MS)) as gateway:
        yield gateway


def window(mt5: Mt5Gateway) -> tuple[int, int]:
    now = mt5.server_time()
    assert isinstance(now, ServerTime)
    return now.epoch_s - 600, now.epoch_s + 600


def lookup(mt5: Mt5Gateway, comment: str, amount_minor: int, login: int = LOGIN) -> object:
    return mt5.find_balance_deal(login, comment, amount_minor, "USD", BAL, *window(mt5))


def deals_with(sim: SimulatorProcess, comment: str) -> list[dict[str, str]]:
    return sim.control.deals(comment=comment)


def test_credit_is_verified_found_and_moves_the_balance(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """A plain credit: Applied with the deal's ticket, one deal with Profit 123.45, the lookup finds
    that ticket, and the account's balance grew by exactly the amount."""
    result = mt5.balance(LOGIN, 12_345, "USD", BAL, "dep:1", check_margin=False)
    assert isinstance(result, Applied)
    [deal] = deals_with(sim, "dep:1")
    assert (int(deal["Deal"]), deal["Profit"], deal["Action"]) == (result.ticket, "123.45", "2")
    assert lookup(mt5, "dep:1", 12_345) == Found(result.ticket)
    account = mt5.account(LOGIN)
    assert isinstance(account, AccountInfo)
    assert (account.currency, account.digits, account.enabled, account.balance) == (
        "USD",
        2,
        True,
        Decimal("123.45"),
    )


def test_timeout_after_apply_is_no_answer_then_found(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 commits, then holds the answer past our timeout: NoAnswer (never retried), and the lookup
    finds the one deal that exists."""
    sim.control.arm_fault(kind="hang_after_apply", endpoint="trade/balance", count=1, delay_ms=HANG_MS)
    result = mt5.balance(LOGIN, 500, "USD", BAL, "dep:2", check_margin=False)
    assert result == NoAnswer("timeout", sent=True)
    [deal] = deals_with(sim, "dep:2")
    assert lookup(mt5, "dep:2", 500) == Found(int(deal["Deal"]))


def test_timeout_before_apply_is_no_answer_then_absent(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 holds the request past our timeout and then drops it unapplied: NoAnswer; once the
    server has given up on it, a complete lookup says Absent and the balance never moved."""
    sim.control.arm_fault(kind="hang_before_apply", endpoint="trade/balance", count=1, delay_ms=HANG_MS)
    assert mt5.balance(LOGIN, 500, "USD", BAL, "dep:3", check_margin=False) == NoAnswer("timeout")
    wait_until(lambda: "fault:hang_before_apply" in sim.logs(), 10, "the server to drop the held request")
    assert lookup(mt5, "dep:3", 500) == Absent()
    assert sim.control.account(LOGIN)["balance"] == "0.00"


def test_apply_then_drop_is_no_answer_then_found(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 commits and closes the connection without answering: NoAnswer, then Found."""
    sim.control.arm_fault(kind="drop_after_apply", endpoint="trade/balance", count=1)
    assert mt5.balance(LOGIN, 700, "USD", BAL, "dep:4", check_margin=False) == NoAnswer("disconnected")
    [deal] = deals_with(sim, "dep:4")
    assert lookup(mt5, "dep:4", 700) == Found(int(deal["Deal"]))


def test_disconnect_before_apply_is_no_answer_then_absent(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """The connection is cut as the request arrives, nothing applied: NoAnswer (the gateway cannot
    know that), then Absent; the next call runs on a new, re-authenticated session."""
    assert isinstance(mt5.account(LOGIN), AccountInfo)  # a session exists before we count
    generation = mt5.session_generation
    sim.control.arm_fault(kind="disconnect", endpoint="trade/balance", count=1)
    assert mt5.balance(LOGIN, 800, "USD", BAL, "dep:5", check_margin=False) == NoAnswer("disconnected")
    assert lookup(mt5, "dep:5", 800) == Absent()
    assert mt5.session_generation == generation + 1


def test_slow_answers(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """A slow answer within the timeout is simply Applied. One slower than the timeout is NoAnswer,
    and MT5 may still execute it afterwards: the resolver must look again after the call's time has
    passed; the lookup then finds it."""
    sim.control.arm_fault(kind="slow", endpoint="trade/balance", comment_prefix="fast:", delay_ms=200)
    assert isinstance(mt5.balance(LOGIN, 100, "USD", BAL, "fast:1", check_margin=False), Applied)
    sim.control.arm_fault(kind="slow", endpoint="trade/balance", comment_prefix="late:", delay_ms=HANG_MS)
    assert mt5.balance(LOGIN, 100, "USD", BAL, "late:1", check_margin=False) == NoAnswer("timeout")
    wait_until(lambda: bool(deals_with(sim, "late:1")), 10, "the late execution")
    assert isinstance(lookup(mt5, "late:1", 100), Found)


def test_unparseable_answer_is_no_answer_then_found(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 commits and answers something that is not JSON: NoAnswer, then Found."""
    sim.control.arm_fault(kind="garbage", endpoint="trade/balance", count=1)
    assert mt5.balance(LOGIN, 900, "USD", BAL, "dep:6", check_margin=False) == NoAnswer("unparseable")
    assert isinstance(lookup(mt5, "dep:6", 900), Found)


@pytest.mark.parametrize("retcode", [12, 10024])
def test_throttling_is_no_answer_and_nothing_applied(
    sim: SimulatorProcess, mt5: Mt5Gateway, retcode: int
) -> None:
    """Throttling (12, 10024) is NoAnswer with the retcode, not Refused: the reference does not say
    "not applied", and a rejection would fail the credit for good. The lookup then says Absent, so
    the credit is retried after resolution."""
    sim.control.arm_fault(kind="throttle", endpoint="trade/balance", count=1, retcode=retcode)
    assert mt5.balance(LOGIN, 100, "USD", BAL, "dep:7", check_margin=False) == NoAnswer("throttled", retcode)
    assert lookup(mt5, "dep:7", 100) == Absent()


def _cross_answers() -> float:
    return REGISTRY.get_sample_value("mt5_gateway_cross_account_answers_total", {"gateway": "mt5"}) or 0.0


def test_cross_account_balance_answer_is_never_success(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 applies our credit but answers with another account's ticket: reading the deal back shows
    another login, so the result is NoAnswer("cross_account_answer"), counted and logged; the
    lookup then finds our own deal."""
    sim.control.add_deals(OTHER, "5.00", "theirs")
    before = _cross_answers()
    sim.control.arm_fault(kind="cross_account", endpoint="trade/balance", count=1, other_login=OTHER)
    assert mt5.balance(LOGIN, 1_000, "USD", BAL, "dep:8", check_margin=False) == NoAnswer(
        "cross_account_answer"
    )
    assert _cross_answers() == before + 1
    [deal] = deals_with(sim, "dep:8")
    assert lookup(mt5, "dep:8", 1_000) == Found(int(deal["Deal"]))


def test_cross_account_reads_are_never_success(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """Crossed answers to reads: a deal page of another login makes the lookup NoAnswer (never
    Absent or Found); a user record of another login makes account() NoAnswer."""
    sim.control.add_deals(OTHER, "5.00", "theirs")
    ours = mt5.balance(LOGIN, 100, "USD", BAL, "dep:9", check_margin=False)
    assert isinstance(ours, Applied)
    sim.control.arm_fault(kind="cross_account", endpoint="deal/get_page", count=1, other_login=OTHER)
    assert lookup(mt5, "dep:9", 100) == NoAnswer("cross_account_answer")
    sim.control.arm_fault(kind="cross_account", endpoint="user/get", count=1, other_login=OTHER)
    assert mt5.account(LOGIN) == NoAnswer("cross_account_answer")
    assert lookup(mt5, "dep:9", 100) == Found(ours.ticket)


@pytest.mark.parametrize(
    ("login", "amount_minor", "expected"),
    [
        (9999, 100, Refused(13, "unknown_login")),
        (DISABLED, 100, Refused(1002, "account_disabled")),
        (LOGIN, -100, Refused(10019, "not_enough_money")),
        (LOGIN, 100_000_000_001, Refused(4005, "money_limit")),
        (LOGIN, 100, Refused(3, "invalid_parameters")),  # type 7 is sent through a retcode fault below
    ],
)
def test_definite_rejections_apply_nothing(
    sim: SimulatorProcess, mt5: Mt5Gateway, login: int, amount_minor: int, expected: Refused
) -> None:
    """Unknown login, disabled account, not enough money, money limit and invalid parameters are
    Refused with MT5's retcode, and no deal exists afterwards."""
    if expected.retcode == 3:
        sim.control.arm_fault(kind="retcode", endpoint="trade/balance", count=1, retcode=3)
    assert mt5.balance(login, amount_minor, "USD", BAL, "dep:10", check_margin=True) == expected
    assert deals_with(sim, "dep:10") == []


def test_refusals_before_calling(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """A currency other than the account's, or an amount its digits cannot carry (1.23 USD into a
    group with 0 digits), is refused by the gateway itself (retcode None): nothing is sent."""
    assert mt5.balance(LOGIN, 100, "EUR", BAL, "dep:11", check_margin=False) == Refused(
        None, "currency_mismatch"
    )
    assert mt5.balance(WHOLE, 123, "USD", BAL, "dep:11", check_margin=False) == Refused(
        None, "amount_not_representable"
    )
    assert isinstance(mt5.balance(WHOLE, 12_300, "USD", BAL, "dep:12", check_margin=False), Applied)
    assert sim.control.deals(comment="dep:11") == []
    assert sim.control.account(WHOLE)["balance"] == "123"


def test_lookup_window_is_on_the_server_clock(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """With the server clock two hours ahead, a window from server_time() finds the deal, while the
    same window on the local clock would not: lookups must use the server's time."""
    sim.control.set_clock_offset(7_200)
    result = mt5.balance(LOGIN, 100, "USD", BAL, "dep:13", check_margin=False)
    assert isinstance(result, Applied)
    server_from, server_to = window(mt5)
    assert server_from - time.time() > 6_000
    assert mt5.find_balance_deal(LOGIN, "dep:13", 100, "USD", BAL, server_from, server_to) == Found(
        result.ticket
    )
    local = int(time.time())
    assert mt5.find_balance_deal(LOGIN, "dep:13", 100, "USD", BAL, local - 600, local + 600) == Absent()


def test_paging_across_more_than_100_deals(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """With 250 deals in the window, the lookup pages (100 at a time) to the deal on the third
    page; a comment on no page is Absent only after all pages; the same comment on the first and
    third page is a Conflict; a page limit too small for the window is NoAnswer."""
    sim.control.add_deals(LOGIN, "1.00", "bulk:{n}", count=120)
    sim.control.add_deals(LOGIN, "2.00", "twice")
    sim.control.add_deals(LOGIN, "1.00", "bulk2:{n}", count=127)
    [target] = sim.control.add_deals(LOGIN, "3.00", "dep:last")
    sim.control.add_deals(LOGIN, "2.00", "twice")
    assert lookup(mt5, "dep:last", 300) == Found(target)
    assert lookup(mt5, "dep:nowhere", 300) == Absent()
    twice = lookup(mt5, "twice", 200)
    assert isinstance(twice, Conflict) and twice.reason == "duplicate_reference" and len(twice.tickets) == 2
    with Mt5Gateway(sim.gateway_settings(lookup_pages_max=2)) as narrow:
        assert lookup(narrow, "dep:last", 300) == NoAnswer("too_many_deals")


def test_same_comment_other_amount_is_a_conflict(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """A deal with our comment but another amount is a Conflict for a person, never Found."""
    [ticket] = sim.control.add_deals(LOGIN, "9.99", "dep:14")
    assert lookup(mt5, "dep:14", 1_000) == Conflict("amount_differs", (ticket,))


def test_comment_cut_to_31(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """MT5 stores a 40-character comment cut to 31; a lookup with the full comment finds it."""
    long_comment = "ref:" + "0123456789" * 4
    [ticket] = sim.control.add_deals(LOGIN, "1.00", long_comment)
    assert sim.control.deals(login=LOGIN)[0]["Comment"] == long_comment[:31]
    assert lookup(mt5, long_comment, 100) == Found(ticket)


def test_concurrent_callers_share_one_serialized_session(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """Three threads credit through one gateway at once: all Applied, the balance is the exact sum,
    and the simulator saw a single manager connection (calls serialized on one session)."""
    results: list[object] = []

    def work(worker: int) -> None:
        results.extend(
            mt5.balance(LOGIN, 1, "USD", BAL, f"t{worker}:{n}", check_margin=False) for n in range(10)
        )

    threads = [threading.Thread(target=work, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 30 and all(isinstance(r, Applied) for r in results)
    assert sim.control.account(LOGIN)["balance"] == "0.30"
    assert len([s for s in sim.control.sessions() if s["authenticated"]]) == 1


def test_a_call_that_waits_too_long_for_the_session_is_never_sent(sim: SimulatorProcess) -> None:
    """While one call holds the session, another that cannot get it within lock_timeout gives up
    with NoAnswer(gateway_busy, sent=False), and is never sent later: only the first deal exists."""
    sim.control.reset()
    sim.control.create_group(USD, "USD", 2)
    sim.control.create_account(LOGIN, USD, balance="0")
    sim.control.arm_fault(kind="slow", endpoint="trade/balance", comment_prefix="first", delay_ms=1_000)
    with Mt5Gateway(sim.gateway_settings(call_timeout_ms=3_000, lock_timeout_ms=200)) as mt5:
        assert isinstance(mt5.account(LOGIN), AccountInfo)  # warm the caches: only balance calls below
        first = threading.Thread(target=mt5.balance, args=(LOGIN, 1, "USD", BAL, "first", False))
        first.start()
        wait_until(lambda: any(s["busy"] for s in sim.control.sessions()), 10, "the first call in flight")
        assert mt5.balance(LOGIN, 2, "USD", BAL, "second", check_margin=False) == NoAnswer(
            "gateway_busy", sent=False
        )
        first.join(10)
        assert lookup(mt5, "second", 2) == Absent()
    assert [d["Comment"] for d in sim.control.deals(login=LOGIN)] == ["first"]


def test_disconnect_mid_session_reauthenticates(sim: SimulatorProcess, mt5: Mt5Gateway) -> None:
    """The server cuts every connection between calls: the next call notices before sending, opens
    and authenticates a new session, and succeeds."""
    assert isinstance(mt5.account(LOGIN), AccountInfo)
    generation = mt5.session_generation
    cut = {s["conn_id"] for s in sim.control.sessions()}
    assert sim.control.disconnect() >= 1
    wait_until(
        lambda: not cut & {s["conn_id"] for s in sim.control.sessions()}, 10, "the connections to close"
    )
    assert isinstance(mt5.balance(LOGIN, 100, "USD", BAL, "dep:15", check_margin=False), Applied)
    assert mt5.session_generation == generation + 1


def test_a_closed_gateway_sends_nothing(sim: SimulatorProcess) -> None:
    """After close(), calls are refused locally (NoAnswer, sent=False) and no session is reopened."""
    sim.control.reset()
    gateway = Mt5Gateway(sim.gateway_settings()).start()
    assert isinstance(gateway.server_time(), ServerTime)
    gateway.close()
    assert gateway.server_time() == NoAnswer("gateway_closed", sent=False)
    assert gateway.balance(LOGIN, 1, "USD", BAL, "dep:closed", check_margin=False) == NoAnswer(
        "gateway_closed", sent=False
    )
    assert sim.control.deals() == []


def test_deals_of_groups_reads_every_deal_of_the_masked_groups_and_splits_cut_windows(
    mt5: Mt5Gateway, sim: SimulatorProcess
) -> None:
    """``deal/get_batch`` by group mask: every deal of the window in the matching groups; an answer
    of rows_max rows or more is taken as possibly cut and its window read again in halves, which
    gives the same deals; a window of one second still full is NoAnswer, never a partial list."""
    start, end = window(mt5)
    t = start + 300
    for i in range(30):
        sim.control.add_deals(LOGIN, "1.00", f"dep:{i}", time_s=t + i)
    sim.control.add_deals(OTHER, "2.00", "", count=5, time_s=t + 100)
    sim.control.add_deals(WHOLE, "3", "x", count=2, time_s=t + 200)
    everything = mt5.deals_of_groups("*", start, end)
    assert isinstance(everything, list) and len(everything) == 37
    only_usd = mt5.deals_of_groups("real\\usd", start, end)
    assert isinstance(only_usd, list) and {d.login for d in only_usd} == {LOGIN, OTHER}
    assert len(only_usd) == 35
    split = mt5.deals_of_groups("*", start, end, rows_max=8)
    assert isinstance(split, list) and [d.ticket for d in split] == [d.ticket for d in everything]
    sim.control.add_deals(LOGIN, "1.00", "same second", count=9, time_s=t + 250)
    assert mt5.deals_of_groups("*", start, end, rows_max=8) == NoAnswer("too_many_deals")


def test_deals_of_groups_without_an_answer_is_no_answer(mt5: Mt5Gateway, sim: SimulatorProcess) -> None:
    """A timeout on get_batch is NoAnswer: "no answer" is never "no deals"."""
    start, end = window(mt5)
    sim.control.arm_fault(kind="disconnect", endpoint="deal/get_batch", count=1)
    assert isinstance(mt5.deals_of_groups("*", start, end), NoAnswer)
