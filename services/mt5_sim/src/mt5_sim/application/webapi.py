"""The Web API's commands: one handler per endpoint, executed under whatever fault is armed.

Session rules (reference §1.5, §6.1): the session is the connection. ``auth/start`` then
``auth/answer`` within the answer window authenticate *that* connection; every other command on an
unauthenticated connection answers ``8 Not enough permissions`` [U: the simulator's choice]. A failed
``auth/answer`` answers its retcode and closes the connection [U].

Every handler validates its parameters before touching state: a malformed request answers ``3``
(or the documented code) and changes nothing. Only ``trade/balance`` writes, in one transaction.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from mt5_sim import metrics
from mt5_sim.application.ports import DealWindow, Store
from mt5_sim.domain import auth, retcodes
from mt5_sim.domain.balance import Refusal, decide, parse_order
from mt5_sim.domain.faults import ArmedFault, FaultBook
from mt5_sim.domain.model import Deal, deal_json, group_json, time_text, trade_state_json, user_json
from mt5_sim.domain.params import group_matches, parse_int, parse_login_list

MIN_CLIENT_VERSION: Final = 484
VERSION_ACCESS: Final = "1290"
VERSION_TRADE: Final = "1290"
PAGE_TOTAL_MAX: Final = 100
EPOCH_S_MAX: Final = 32_503_680_000  # year 3000: keeps the millisecond bounds inside bigint
AUTH_ENDPOINTS: Final = frozenset({"auth/start", "auth/answer"})
GARBAGE_BODY: Final = b"<html><body>502 Bad Gateway</body></html>"


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer to write: ``{"retcode": …, "answer": …, **top}`` or ``raw`` bytes."""

    retcode: int
    answer: Any = None
    top: Mapping[str, str] = field(default_factory=dict)
    close: bool = False
    raw: bytes | None = None
    http_status: int = 200


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the connection without answering."""

    reason: str


Outcome = Reply | Drop


@dataclass(frozen=True, slots=True)
class PendingAuth:
    login: int
    srv_rand: str
    started_s: float  # monotonic


@dataclass(slots=True)
class SessionState:
    """One connection's session."""

    conn_id: int
    peer: str
    manager_login: int | None = None
    authenticated: bool = False
    pending: PendingAuth | None = None
    requests: int = 0


class SimClock:
    """The server's clock: the host's wall clock plus an offset the control API can set."""

    def __init__(self) -> None:
        self.offset_s = 0

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_s * 1000

    def monotonic_s(self) -> float:
        return time.monotonic()


Handler = Callable[[SessionState, Mapping[str, str]], Awaitable[Reply]]


class ControlState:
    """What the control API set that must survive a restart of the simulator: the fault book (with
    what each fault already fired) and the clock offset. Saved whole after every change and every
    firing, under a lock so that the last write is the latest state; loaded at start."""

    def __init__(self, store: Store, faults: FaultBook, clock: SimClock) -> None:
        self._store, self._faults, self._clock = store, faults, clock
        self._lock = asyncio.Lock()

    async def save(self) -> None:
        async with self._lock:
            state = {"faults": self._faults.snapshot(), "clock_offset_s": self._clock.offset_s}
            await self._store.save_control_state(state)

    async def load(self) -> bool:
        """Restore a stored state; False when there is none (a fresh or reset simulator)."""
        state = await self._store.load_control_state()
        if state is None:
            return False
        self._faults.restore(state["faults"])
        self._clock.offset_s = int(state["clock_offset_s"])
        return True


class WebApi:
    """Executes commands for sessions; the HTTP layer only parses and writes."""

    def __init__(
        self,
        store: Store,
        faults: FaultBook,
        clock: SimClock,
        managers: Mapping[int, bytes],
        auth_window_ms: int,
        rand_hex: Callable[[], str] = lambda: os.urandom(16).hex(),
        control: ControlState | None = None,
    ) -> None:
        self._store, self._faults, self._clock = store, faults, clock
        self._control = control
        self._managers = dict(managers)  # login -> password hash
        self._auth_window_s = auth_window_ms / 1000
        self._rand_hex = rand_hex
        self._recent_logins: list[int] = []
        self._handlers: dict[str, Handler] = {
            "auth/start": self._auth_start,
            "auth/answer": self._auth_answer,
            "test/access": self._test_access,
            "quit": self._quit,
            "user/get": self._user_get,
            "user/account/get": self._user_account_get,
            "group/get": self._group_get,
            "trade/balance": self._trade_balance,
            "deal/get": self._deal_get,
            "deal/get_total": self._deal_get_total,
            "deal/get_page": self._deal_get_page,
            "deal/get_batch": self._deal_get_batch,
            "time/server": self._time_server,
        }

    @property
    def endpoints(self) -> frozenset[str]:
        return frozenset(self._handlers)

    async def handle(self, session: SessionState, endpoint: str, params: Mapping[str, str]) -> Outcome:
        """Run one command under the first armed fault that matches it (if any)."""
        login = parse_int(params.get("login"), minimum=1)
        fault = self._faults.take(endpoint, login, params.get("comment"))
        if fault is not None:
            metrics.FAULTS_FIRED.labels(fault.spec.kind).inc()
            if self._control is not None:
                await self._control.save()  # a restart must not fire a counted fault again
        outcome = await self._under_fault(fault, session, endpoint, params)
        if login is not None:
            self._remember(login)
        return outcome

    async def _under_fault(  # noqa: PLR0911 - one exit per fault kind reads best
        self, fault: ArmedFault | None, session: SessionState, endpoint: str, params: Mapping[str, str]
    ) -> Outcome:
        kind = fault.spec.kind if fault else None
        delay_s = fault.spec.delay_ms / 1000 if fault else 0.0
        if fault is not None and kind in ("throttle", "retcode"):
            return Reply(fault.spec.retcode)
        if kind == "disconnect":
            return Drop("fault:disconnect")
        if kind in ("hang_before_apply", "slow"):
            await asyncio.sleep(delay_s)
            if kind == "hang_before_apply":
                return Drop("fault:hang_before_apply")
        reply = await self.execute(session, endpoint, params)
        if kind == "drop_after_apply":
            return Drop("fault:drop_after_apply")
        if kind == "hang_after_apply":
            await asyncio.sleep(delay_s)
            return Drop("fault:hang_after_apply")
        if kind == "garbage":
            return replace(reply, raw=GARBAGE_BODY)
        if fault is not None and kind == "cross_account":
            return await self._cross_account(reply, endpoint, params, fault.spec.other_login)
        return reply

    async def execute(self, session: SessionState, endpoint: str, params: Mapping[str, str]) -> Reply:
        handler = self._handlers.get(endpoint)
        if handler is None:
            return Reply(retcodes.ERR_NOTIMPLEMENT, http_status=404)
        if endpoint not in AUTH_ENDPOINTS and not session.authenticated:
            return Reply(retcodes.ERR_PERMISSIONS)
        return await handler(session, params)

    def _remember(self, login: int) -> None:
        self._recent_logins = [login, *(x for x in self._recent_logins if x != login)][:2]

    # -- authentication --------------------------------------------------------------------------

    async def _auth_start(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        version = parse_int(params.get("version"))
        agent = params.get("agent", "")
        login = parse_int(params.get("login"), minimum=1)
        session.authenticated, session.pending = False, None
        if version is None or login is None or not agent or " " in agent:
            return Reply(retcodes.ERR_PARAMS)
        if version < MIN_CLIENT_VERSION:
            return Reply(retcodes.AUTH_CLIENT_OLD)
        if params.get("type", "").lower() != "manager":
            return Reply(retcodes.AUTH_CLIENT_INVALID)
        srv_rand = self._rand_hex()
        session.pending = PendingAuth(login, srv_rand, self._clock.monotonic_s())
        return Reply(retcodes.OK, top={"version_access": VERSION_ACCESS, "srv_rand": srv_rand})

    async def _auth_answer(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        pending, session.pending = session.pending, None  # one answer per start, right or wrong
        srv_rand_answer, cli_rand = params.get("srv_rand_answer", ""), params.get("cli_rand", "")
        outcome, reply = self._check_answer(pending, srv_rand_answer, cli_rand)
        metrics.AUTHENTICATIONS.labels(outcome).inc()
        if reply.retcode == retcodes.OK and pending is not None:
            session.authenticated, session.manager_login = True, pending.login
        return reply

    def _check_answer(
        self, pending: PendingAuth | None, srv_rand_answer: str, cli_rand: str
    ) -> tuple[str, Reply]:
        if pending is None or not auth.is_rand_hex(srv_rand_answer) or not auth.is_rand_hex(cli_rand):
            return "malformed", Reply(retcodes.ERR_PARAMS, close=True)
        if self._clock.monotonic_s() - pending.started_s > self._auth_window_s:
            return "too_late", Reply(retcodes.ERR_TIMEOUT, close=True)
        pw_hash = self._managers.get(pending.login)
        if pw_hash is None or not auth.answer_matches(pw_hash, pending.srv_rand, srv_rand_answer):
            return "bad_password", Reply(retcodes.USR_INVALID_PASSWORD, close=True)
        top = {
            "version_access": VERSION_ACCESS,
            "version_trade": VERSION_TRADE,
            "cli_rand_answer": auth.rand_answer(pw_hash, cli_rand),
        }
        return "ok", Reply(retcodes.OK, top=top)

    async def _test_access(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        return Reply(retcodes.OK)

    async def _quit(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        session.authenticated = False
        return Reply(retcodes.OK, close=True)

    # -- accounts --------------------------------------------------------------------------------

    async def _user_get(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        return await self._account_reply(params, user_json)

    async def _user_account_get(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        return await self._account_reply(params, trade_state_json)

    async def _account_reply(self, params: Mapping[str, str], render: Callable[..., dict[str, str]]) -> Reply:
        login = parse_int(params.get("login"), minimum=1)
        if login is None:
            return Reply(retcodes.ERR_PARAMS)
        found = await self._store.account(login)
        if found is None:
            return Reply(retcodes.ERR_NOTFOUND)
        return Reply(retcodes.OK, render(*found))

    async def _group_get(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        name = params.get("group")
        if not name:
            return Reply(retcodes.ERR_PARAMS)
        group = await self._store.group(name)
        return Reply(retcodes.OK, group_json(group)) if group else Reply(retcodes.ERR_NOTFOUND)

    # -- the balance operation -------------------------------------------------------------------

    async def _trade_balance(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        order = parse_order(params)
        if isinstance(order, Refusal):
            return Reply(order.retcode)
        result = await self._store.apply_balance(
            order, decide, self._clock.wall_ms(), session.manager_login or 0
        )
        if isinstance(result, Refusal):
            return Reply(result.retcode)
        metrics.BALANCE_DEALS.inc()
        return Reply(retcodes.OK, {"Ticket": str(result.ticket)})

    # -- deals -----------------------------------------------------------------------------------

    async def _deal_get(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        ticket = parse_int(params.get("ticket"), minimum=1)
        if ticket is None:
            return Reply(retcodes.ERR_PARAMS)
        deal = await self._store.deal(ticket)
        return Reply(retcodes.OK, deal_json(deal)) if deal else Reply(retcodes.ERR_NOTFOUND)

    async def _deal_get_total(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        window = _window(params)
        if window is None:
            return Reply(retcodes.ERR_PARAMS)
        return Reply(retcodes.OK, {"Total": str(await self._store.count_deals(window))})

    async def _deal_get_page(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        window = _window(params)
        offset = parse_int(params.get("offset"))
        total = parse_int(params.get("total"), minimum=1, maximum=PAGE_TOTAL_MAX)
        if window is None or offset is None or total is None:
            return Reply(retcodes.ERR_PARAMS)
        deals = await self._store.page_deals(window, offset, total)
        return Reply(retcodes.OK, [deal_json(d) for d in deals])

    async def _deal_get_batch(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        selectors = [name for name in ("login", "group", "ticket") if params.get(name)]
        if len(selectors) != 1:
            return Reply(retcodes.ERR_PARAMS)
        if selectors[0] == "ticket":
            tickets = parse_login_list(params.get("ticket"))
            if tickets is None:
                return Reply(retcodes.ERR_PARAMS)
            return _deals_reply(await self._store.batch_deals(None, tickets, 0, 0), params)
        bounds = _bounds(params)
        logins = await self._batch_logins(selectors[0], params)
        if bounds is None or logins is None:
            return Reply(retcodes.ERR_PARAMS)
        return _deals_reply(await self._store.batch_deals(logins, None, *bounds), params)

    async def _batch_logins(self, selector: str, params: Mapping[str, str]) -> list[int] | None:
        if selector == "login":
            return parse_login_list(params.get("login"))
        masks = params.get("group", "")
        groups = [g.name for g in await self._store.groups() if group_matches(g.name, masks)]
        return await self._store.logins_in_groups(groups)

    async def _time_server(self, session: SessionState, params: Mapping[str, str]) -> Reply:
        return Reply(retcodes.OK, {"Time": time_text(self._clock.wall_ms() // 1000)})

    # -- the cross-account fault -----------------------------------------------------------------

    async def _cross_account(
        self, reply: Reply, endpoint: str, params: Mapping[str, str], other_login: int | None
    ) -> Reply:
        """``reply`` as it would have been for another account: the crossed-answers bug."""
        login = parse_int(params.get("login"), minimum=1) or 0
        other = other_login or next((x for x in self._recent_logins if x != login), None)
        other = other or await self._store.other_login(login)
        if reply.retcode != retcodes.OK or other is None:
            return reply
        latest = await self._store.latest_deals(other, PAGE_TOTAL_MAX)
        if endpoint in ("user/get", "user/account/get", "deal/get_total", "deal/get_page") or (
            endpoint == "deal/get_batch" and params.get("login")
        ):
            crossed = await self._handlers[endpoint](
                SessionState(0, "", authenticated=True), {**params, "login": str(other)}
            )
            empty = isinstance(crossed.answer, list) and not crossed.answer
            return replace(crossed, answer=[deal_json(d) for d in latest]) if empty else crossed
        return _crossed_deals(reply, endpoint, latest)


def _crossed_deals(reply: Reply, endpoint: str, latest: list[Deal]) -> Reply:
    """Answers that do not name a login in their request get the other account's latest deals."""
    if endpoint == "trade/balance":
        return replace(reply, answer={"Ticket": str(latest[0].ticket if latest else 1)})
    if endpoint == "deal/get" and latest:
        return replace(reply, answer=deal_json(latest[0]))
    if endpoint == "deal/get_batch":
        return replace(reply, answer=[deal_json(d) for d in latest])
    return reply


def _bounds(params: Mapping[str, str]) -> tuple[int, int] | None:
    from_s = parse_int(params.get("from"), maximum=EPOCH_S_MAX)
    to_s = parse_int(params.get("to"), maximum=EPOCH_S_MAX)
    if from_s is None or to_s is None or from_s > to_s:
        return None
    return from_s, to_s


def _window(params: Mapping[str, str]) -> DealWindow | None:
    login = parse_int(params.get("login"), minimum=1)
    bounds = _bounds(params)
    if login is None or bounds is None:
        return None
    return DealWindow(login, *bounds)


def _deals_reply(deals: list[Deal], params: Mapping[str, str]) -> Reply:
    # Balance deals have no symbol: a symbol filter selects none of them.
    if params.get("symbol"):
        deals = []
    return Reply(retcodes.OK, [deal_json(d) for d in deals])
