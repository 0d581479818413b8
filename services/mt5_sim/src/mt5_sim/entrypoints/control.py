"""The control API (JSON over HTTP, its own port): test fixtures, fault switches, health, metrics.

Never expose it: anyone who reaches it can create money. Every write validates its whole input first
and answers 400 with a message naming the bad field; nothing is changed by a rejected request.
Routes are listed in the service README with curl examples.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, Final

from aiohttp import web
from backbone import bodies
from backbone.health import Health, aiohttp_routes

from mt5_sim.application.ports import NewDeal, Store, StoreConflict
from mt5_sim.application.webapi import ControlState, SimClock
from mt5_sim.domain.faults import FaultBook, FaultSpecError, parse_spec
from mt5_sim.domain.model import DEFAULT_RIGHTS, USER_RIGHT_ENABLED, Account, Group, deal_json, money_text
from mt5_sim.domain.params import COMMENT_UNITS_MAX, cut_comment, parse_decimal
from mt5_sim.entrypoints.webapi_server import WebApiServer

DEALS_PER_CALL_MAX: Final = 10_000
LIST_LIMIT_MAX: Final = 10_000
BODY_MAX_BYTES: Final = 4 * 1024 * 1024  # a batch of DEALS_PER_CALL_MAX deals
CLOCK_OFFSET_S_MAX: Final = 10 * 365 * 24 * 3600
_CURRENCY: Final = re.compile(r"[A-Z]{3}")
Route = Callable[[web.Request], Awaitable[web.Response]]


class BadInput(Exception):
    """A control request that cannot be applied (400, unless the body reader said otherwise)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


async def _body(request: web.Request) -> dict[str, Any]:
    read = await bodies.read(request, bodies.JSON_TYPES, BODY_MAX_BYTES)
    if isinstance(read, bodies.Refusal):
        raise BadInput(f"{read.code}: {read.message}", read.status)
    body = read.document
    if not isinstance(body, dict):
        raise BadInput("body must be a JSON object")
    return body


def _int(body: dict[str, Any], name: str, *, default: int | None = None, minimum: int = 0) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInput(f"{name} must be an integer >= {minimum}")
    return value


def _amount(body: dict[str, Any], name: str, digits: int, default: str | None = None) -> Decimal:
    raw = body.get(name, default)
    value = parse_decimal(raw) if isinstance(raw, str) else None
    if value is None:
        raise BadInput(f'{name} must be decimal text such as "100.00" (strings only: no floats for money)')
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -digits:
        raise BadInput(f"{name} has more than the group's {digits} decimal places")
    return value


def _small_natural(raw: str) -> bool:
    """ASCII digits that fit a PostgreSQL bigint (``str.isdigit`` alone takes "¹" and any length)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 18


def _account_view(account: Account, group: Group) -> dict[str, Any]:
    return {
        "login": account.login,
        "group": account.group,
        "currency": group.currency,
        "digits": group.digits,
        "rights": account.rights,
        "enabled": account.enabled,
        "balance": money_text(account.balance, group.digits),
        "credit": money_text(account.credit, group.digits),
        "margin": money_text(account.margin, group.digits),
    }


def _rights(body: dict[str, Any], current: int | None) -> int | None:
    rights = _int(body, "rights") if "rights" in body else current
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise BadInput("enabled must be true or false")
        base = DEFAULT_RIGHTS if rights is None else rights
        rights = base | USER_RIGHT_ENABLED if body["enabled"] else base & ~USER_RIGHT_ENABLED
    return rights


class ControlApi:
    def __init__(
        self,
        store: Store,
        faults: FaultBook,
        clock: SimClock,
        server: WebApiServer,
        control: ControlState | None = None,
    ) -> None:
        self._store, self._faults, self._clock, self._server = store, faults, clock, server
        self._control = control

    def routes(self, health: Health) -> list[web.RouteDef]:
        guarded = self._guarded
        return [
            web.get("/control/state", guarded(self.state)),
            web.get("/control/faults", guarded(self.list_faults)),
            web.post("/control/faults", guarded(self.arm_fault)),
            web.delete("/control/faults", guarded(self.clear_faults)),
            web.delete("/control/faults/{fault_id}", guarded(self.clear_faults)),
            web.get("/control/clock", guarded(self.get_clock)),
            web.put("/control/clock", guarded(self.set_clock)),
            web.get("/control/groups", guarded(self.list_groups)),
            web.post("/control/groups", guarded(self.create_group)),
            web.post("/control/accounts", guarded(self.create_account)),
            web.get("/control/accounts/{login}", guarded(self.get_account)),
            web.patch("/control/accounts/{login}", guarded(self.update_account)),
            web.get("/control/deals", guarded(self.list_deals)),
            web.post("/control/deals", guarded(self.add_deals)),
            web.post("/control/reset", guarded(self.reset)),
            web.get("/control/sessions", guarded(self.sessions)),
            web.post("/control/disconnect", guarded(self.disconnect)),
            *aiohttp_routes(health),
        ]

    @staticmethod
    def _guarded(route: Route) -> Route:
        async def wrapper(request: web.Request) -> web.Response:
            try:
                return await route(request)
            except BadInput as exc:
                return _error(exc.status, str(exc))
            except FaultSpecError as exc:
                return _error(400, str(exc))
            except StoreConflict as exc:
                return _error(409, str(exc))

        return wrapper

    # -- faults and clock ------------------------------------------------------------------------

    async def state(self, _: web.Request) -> web.Response:
        return _json(
            {
                "clock_offset_s": self._clock.offset_s,
                "faults": self._faults.describe(),
                "sessions": self._server.sessions(),
            }
        )

    async def list_faults(self, _: web.Request) -> web.Response:
        return _json({"faults": self._faults.describe()})

    async def arm_fault(self, request: web.Request) -> web.Response:
        fault = self._faults.arm(parse_spec(await _body(request)))
        await self._save()
        return _json({"fault": fault.describe()}, 201)

    async def clear_faults(self, request: web.Request) -> web.Response:
        fault_id = request.match_info.get("fault_id")
        cleared = self._faults.clear(fault_id)
        if fault_id is not None and cleared == 0:  # a refusal changes nothing, not even the saved state
            return _error(404, f"no fault {fault_id}")
        await self._save()
        return _json({"cleared": cleared})

    async def _save(self) -> None:
        if self._control is not None:
            await self._control.save()

    async def get_clock(self, _: web.Request) -> web.Response:
        return _json({"offset_s": self._clock.offset_s, "server_time_s": self._clock.wall_ms() // 1000})

    async def set_clock(self, request: web.Request) -> web.Response:
        body = await _body(request)
        offset = body.get("offset_s")
        if isinstance(offset, bool) or not isinstance(offset, int) or abs(offset) > CLOCK_OFFSET_S_MAX:
            raise BadInput(f"offset_s must be an integer within ±{CLOCK_OFFSET_S_MAX}")
        self._clock.offset_s = offset
        await self._save()
        return await self.get_clock(request)

    # -- groups and accounts ---------------------------------------------------------------------

    async def list_groups(self, _: web.Request) -> web.Response:
        groups = await self._store.groups()
        return _json(
            {"groups": [{"group": g.name, "currency": g.currency, "digits": g.digits} for g in groups]}
        )

    async def create_group(self, request: web.Request) -> web.Response:
        body = await _body(request)
        name, currency = body.get("group"), body.get("currency")
        if not isinstance(name, str) or not 0 < len(name) <= 64:
            raise BadInput('group must be a name of 1-64 characters, e.g. "real\\\\usd"')
        if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
            raise BadInput("currency must be three capital letters")
        digits = _int(body, "digits", default=2)
        if digits > 8:
            raise BadInput("digits must be 0..8")
        await self._store.create_group(Group(name, currency, digits))
        return _json({"group": name, "currency": currency, "digits": digits}, 201)

    async def create_account(self, request: web.Request) -> web.Response:
        body = await _body(request)
        login, group_name = _int(body, "login", minimum=1), body.get("group")
        group = await self._store.group(group_name) if isinstance(group_name, str) else None
        if group is None:
            raise BadInput("group must name an existing group")
        name = body.get("name", "")
        if not isinstance(name, str):
            raise BadInput("name must be a string")
        rights = _rights(body, None)
        account = Account(
            login,
            group.name,
            DEFAULT_RIGHTS if rights is None else rights,
            name,
            _int(body, "leverage", default=100, minimum=1),
            _amount(body, "balance", group.digits, "0"),
            _amount(body, "credit", group.digits, "0"),
            _amount(body, "margin", group.digits, "0"),
            int(time.time()),
        )
        await self._store.create_account(account)
        return _json(_account_view(account, group), 201)

    async def _found(self, request: web.Request) -> tuple[Account, Group]:
        login = request.match_info["login"]
        found = await self._store.account(int(login)) if login.isdigit() and len(login) < 19 else None
        if found is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no account {login}"}), content_type="application/json"
            )
        return found

    async def get_account(self, request: web.Request) -> web.Response:
        return _json(_account_view(*await self._found(request)))

    async def update_account(self, request: web.Request) -> web.Response:
        account, group = await self._found(request)
        body = await _body(request)
        unknown = set(body) - {"rights", "enabled", "group", "balance", "credit", "margin"}
        if unknown:
            raise BadInput(f"unknown fields: {sorted(unknown)}")
        new_group = await self._store.group(body["group"]) if isinstance(body.get("group"), str) else group
        if new_group is None or ("group" in body and not isinstance(body["group"], str)):
            raise BadInput("group must name an existing group")
        money = {
            k: _amount(body, k, new_group.digits) if k in body else None
            for k in ("balance", "credit", "margin")
        }
        await self._store.update_account(
            account.login, rights=_rights(body, account.rights), group=new_group.name, **money
        )
        return await self.get_account(request)

    # -- deals -----------------------------------------------------------------------------------

    async def list_deals(self, request: web.Request) -> web.Response:
        query = request.query
        login = query.get("login")
        limit = query.get("limit", "1000")
        if (
            (login is not None and not _small_natural(login))
            or not _small_natural(limit)
            or int(limit) > LIST_LIMIT_MAX
        ):
            raise BadInput(f"login must be a number; limit a number <= {LIST_LIMIT_MAX}")
        deals = await self._store.list_deals(
            int(login) if login else None, query.get("comment"), query.get("comment_prefix"), int(limit)
        )
        return _json({"deals": [deal_json(d) for d in deals]})

    async def add_deals(self, request: web.Request) -> web.Response:
        """Deals made by someone else (a dealer in the terminal): the deal and its balance change."""
        body = await _body(request)
        login = _int(body, "login", minimum=1)
        found = await self._store.account(login)
        if found is None:
            raise BadInput(f"no account {login}")
        action, count = _int(body, "action", default=2), _int(body, "count", default=1, minimum=1)
        comment = body.get("comment", "")
        if action > 20 or count > DEALS_PER_CALL_MAX or not isinstance(comment, str):
            raise BadInput(f"action 0..20, count 1..{DEALS_PER_CALL_MAX}, comment a string")
        time_s = _int(body, "time_s", default=self._clock.wall_ms() // 1000)
        amount = _amount(body, "amount", found[1].digits)
        deals = [
            NewDeal(
                login, action, amount, cut_comment(comment.replace("{n}", str(n))), time_s * 1000 + n % 1000
            )
            for n in range(count)
        ]
        written = await self._store.insert_deals(deals, dealer=0)
        return _json({"tickets": [d.ticket for d in written], "comment_units_max": COMMENT_UNITS_MAX}, 201)

    async def reset(self, _: web.Request) -> web.Response:
        await self._store.reset()
        self._faults.clear()
        self._clock.offset_s = 0
        return _json({"reset": True})

    async def sessions(self, _: web.Request) -> web.Response:
        return _json({"sessions": self._server.sessions()})

    async def disconnect(self, request: web.Request) -> web.Response:
        body = await _body(request) if request.can_read_body else {}
        manager = _int(body, "manager_login", minimum=1) if "manager_login" in body else None
        return _json({"disconnected": self._server.disconnect(manager)})
