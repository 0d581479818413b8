"""The control API over HTTP (aiohttp, JSON): configuration, faults, chargebacks, pending refunds, payouts,
webhook deliveries, reports and reset. For tests and demos: bound to 127.0.0.1 by default and not
authenticated (see the README). Every error is ``{"error": {"code", "message"}}`` with a 4xx status.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

from aiohttp import web
from backbone import bodies
from backbone.health import Health, aiohttp_routes

from psp_sim.application.answers import Response
from psp_sim.application.config import ConfigError
from psp_sim.application.control import DISPUTE_REASONS, ControlService
from psp_sim.application.faults import FaultBook, FaultRuleError
from psp_sim.domain.intents import ActionOutcome
from psp_sim.domain.reports import parse_batch_id
from psp_sim.domain.wire import dumps
from psp_sim.entrypoints.http_input import has_nul

BODY_MAX_BYTES: Final = 65_536
DELIVERIES_LIMIT_MAX: Final = 10_000
DISCREPANCY_KINDS: Final = frozenset({"missing_row", "wrong_amount", "extra_row"})
_CODE: Final = re.compile(r"[a-z0-9_]{1,64}")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadRequest(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _ok(document: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=dumps(document), content_type="application/json")


def _error(status: int, code: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=dumps({"error": {"code": code, "message": message}}),
        content_type="application/json",
    )


def _from(response: Response) -> web.Response:
    return web.Response(status=response.status, body=response.body, content_type="application/json")


def _csv(text: str, name: str) -> web.Response:
    return web.Response(
        text=text, content_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


async def _body(request: web.Request) -> dict[str, Any]:
    body = await bodies.read(request, bodies.JSON_TYPES, BODY_MAX_BYTES)
    match body:
        case bodies.Refusal(status=status, code=code, message=message):
            raise BadRequest(code, message, status)
    document = {} if body.document is None else body.document
    if not isinstance(document, dict):
        raise BadRequest("invalid_json", "The body must be a JSON object.")
    return document


def _date(value: Any, name: str = "date") -> dt.date:
    if not isinstance(value, str):
        raise BadRequest("parameter_missing", f"{name} (YYYY-MM-DD) is required.")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise BadRequest("parameter_invalid", f"{name} must be YYYY-MM-DD.") from None


def _optional_int(document: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = document.get(name)
    if value is not None and (type(value) is not int or not low <= value <= high):
        raise BadRequest("parameter_invalid", f"{name} must be an integer {low}..{high}.")
    return value


class ControlHandlers:
    def __init__(self, control: ControlService, faults: FaultBook) -> None:
        self._control, self._faults = control, faults

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if has_nul(request.query):
                raise BadRequest("parameter_invalid", "NUL characters are not accepted.")
            return await handler(request)
        except BadRequest as bad:
            return _error(bad.status, bad.code, bad.message)
        except (ConfigError, FaultRuleError) as bad:
            return _error(400, "parameter_invalid", str(bad))
        except web.HTTPRequestEntityTooLarge:
            return _error(413, "body_too_large", "The request body is too large.")
        except web.HTTPNotFound:
            return _error(404, "unknown_route", "Unrecognized control URL.")
        except web.HTTPMethodNotAllowed:
            return _error(405, "method_not_allowed", "Method not allowed.")

    # -- configuration -------------------------------------------------------------------------------

    async def get_config(self, _: web.Request) -> web.StreamResponse:
        return _ok(self._control.config.public_json())

    async def patch_config(self, request: web.Request) -> web.StreamResponse:
        changes = await _body(request)
        if "secrets" in changes:
            raise BadRequest("parameter_invalid", "Change secrets with /control/webhook-secrets/rotate.")
        return _ok((await self._control.change_config(changes)).public_json())

    async def rotate_secret(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        keep = body.get("keep_previous", True)
        if not isinstance(keep, bool):
            raise BadRequest("parameter_invalid", "keep_previous must be true or false.")
        config = await self._control.rotate_secret(body.get("secret"), keep_previous=keep)
        return _ok(config.public_json())

    async def end_rotation(self, _: web.Request) -> web.StreamResponse:
        return _ok((await self._control.end_rotation()).public_json())

    # -- faults -----------------------------------------------------------------------------------------

    async def add_fault(self, request: web.Request) -> web.StreamResponse:
        return _ok((await self._control.add_fault(await _body(request))).as_json(), 201)

    async def list_faults(self, _: web.Request) -> web.StreamResponse:
        return _ok({"data": [rule.as_json() for rule in self._faults.rules]})

    async def clear_faults(self, _: web.Request) -> web.StreamResponse:
        await self._control.clear_faults()
        return _ok({"cleared": True})

    async def delete_fault(self, request: web.Request) -> web.StreamResponse:
        if not await self._control.remove_fault(request.match_info["id"]):
            return _error(404, "resource_missing", "No such fault rule.")
        return _ok({"deleted": request.match_info["id"]})

    # -- chargebacks, refunds, webhooks ----------------------------------------------------------------------

    async def dispute(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        reason = body.get("reason", "fraudulent")
        if reason not in DISPUTE_REASONS:
            raise BadRequest("parameter_invalid", f"reason must be one of {sorted(DISPUTE_REASONS)}.")
        amount = _optional_int(body, "amount_minor", 1, 99_999_999_999)
        return _from(await self._control.dispute(request.match_info["id"], amount, reason))

    async def complete_refund(self, request: web.Request) -> web.StreamResponse:
        outcome = (await _body(request)).get("outcome")
        if outcome not in ("succeeded", "failed"):
            raise BadRequest("parameter_invalid", "outcome must be 'succeeded' or 'failed'.")
        return _from(
            await self._control.complete_refund(request.match_info["id"], cast(ActionOutcome, outcome))
        )

    async def return_payout(self, request: web.Request) -> web.StreamResponse:
        code = (await _body(request)).get("code")
        if code is not None and (not isinstance(code, str) or _CODE.fullmatch(code) is None):
            raise BadRequest("parameter_invalid", "code must be 1..64 characters of a-z, 0-9 and _.")
        return _from(await self._control.return_payout(request.match_info["id"], code))

    async def count_payouts(self, request: web.Request) -> web.StreamResponse:
        reference = request.query.get("reference")
        if not reference:
            raise BadRequest("parameter_missing", "Give ?reference=.")
        return _ok({"reference": reference, "count": await self._control.count_payouts(reference)})

    async def release_webhooks(self, request: web.Request) -> web.StreamResponse:
        group = (await _body(request)).get("hold_group")
        if group is not None and not isinstance(group, str):
            raise BadRequest("parameter_invalid", "hold_group must be a string.")
        return _ok({"released": await self._control.release_held(group)})

    async def deliveries(self, request: web.Request) -> web.StreamResponse:
        names = ("event_type", "reference", "intent", "state", "event_id")
        filters = {name: request.query[name] for name in names if request.query.get(name)}
        raw = request.query.get("limit", "200")
        limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 5 else 0
        if not 1 <= limit <= DELIVERIES_LIMIT_MAX:
            raise BadRequest("parameter_invalid", f"limit must be an integer 1..{DELIVERIES_LIMIT_MAX}.")
        return _ok({"data": await self._control.deliveries(filters, limit)})

    # -- reports ---------------------------------------------------------------------------------------------

    async def balance_transactions(self, request: web.Request) -> web.StreamResponse:
        intent_id, reference = request.query.get("payment_intent"), request.query.get("reference")
        if not intent_id and not reference:
            raise BadRequest("parameter_missing", "Give ?payment_intent= or ?reference=.")
        found = await self._control.balance_transactions(intent_id=intent_id or None, reference=reference)
        return _ok({"data": found})

    async def settlement(self, request: web.Request) -> web.StreamResponse:
        day = _date(request.query.get("date"))
        text = await self._control.settlement_csv(day, request.query.get("seed"))
        return _csv(text, f"settlement_{day:%Y%m%d}.csv")

    async def bank_deposits(self, request: web.Request) -> web.StreamResponse:
        day = _date(request.query.get("date"))
        text = await self._control.bank_csv(day, request.query.get("seed"))
        return _csv(text, f"bank_deposits_{day:%Y%m%d}.csv")

    async def bank_deposit(self, request: web.Request) -> web.StreamResponse:
        batch_id = request.match_info["batch_id"]
        parsed = parse_batch_id(batch_id)
        if parsed is None:
            return _error(404, "resource_missing", "No such payout batch.")
        text = await self._control.bank_csv(parsed[0], request.query.get("seed"), batch_id)
        if text.count("\n") < 2:
            return _error(404, "resource_missing", "No such payout batch.")
        return _csv(text, f"bank_deposit_{batch_id}.csv")

    async def add_discrepancy(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        kind = body.get("kind")
        if kind not in DISCREPANCY_KINDS:
            raise BadRequest("parameter_invalid", f"kind must be one of {sorted(DISCREPANCY_KINDS)}.")
        reference, currency = body.get("reference"), body.get("currency")
        if reference is not None and not isinstance(reference, str):
            raise BadRequest("parameter_invalid", "reference must be a string.")
        if currency is not None and (not isinstance(currency, str) or len(currency) != 3):
            raise BadRequest("parameter_invalid", "currency must be an ISO-4217 code.")
        delta = _optional_int(body, "amount_delta_minor", -99_999_999_999, 99_999_999_999) or 0
        new_id = await self._control.add_discrepancy(
            _date(body.get("business_date"), "business_date"), kind, reference, delta, currency
        )
        return _ok({"id": new_id}, 201)

    async def clear_discrepancies(self, _: web.Request) -> web.StreamResponse:
        await self._control.clear_discrepancies()
        return _ok({"cleared": True})

    async def reset(self, _: web.Request) -> web.StreamResponse:
        await self._control.reset()
        return _ok({"reset": True})

    async def backlog(self, _: web.Request) -> web.StreamResponse:
        return _ok({"pending_or_held": await self._control.backlog()})


def control_app(h: ControlHandlers, health: Health) -> web.Application:
    app = web.Application(client_max_size=BODY_MAX_BYTES, middlewares=[h.middleware])
    app.add_routes(
        [
            web.get("/control/config", h.get_config),
            web.patch("/control/config", h.patch_config),
            web.post("/control/webhook-secrets/rotate", h.rotate_secret),
            web.post("/control/webhook-secrets/end-rotation", h.end_rotation),
            web.post("/control/faults", h.add_fault),
            web.get("/control/faults", h.list_faults),
            web.delete("/control/faults", h.clear_faults),
            web.delete("/control/faults/{id}", h.delete_fault),
            web.post("/control/payment_intents/{id}/dispute", h.dispute),
            web.post("/control/refunds/{id}/complete", h.complete_refund),
            web.post("/control/payouts/{id}/return", h.return_payout),
            web.get("/control/payouts/count", h.count_payouts),
            web.post("/control/webhooks/release", h.release_webhooks),
            web.get("/control/webhook-deliveries", h.deliveries),
            web.get("/control/webhook-backlog", h.backlog),
            web.get("/control/balance-transactions", h.balance_transactions),
            web.get("/control/reports/settlement", h.settlement),
            web.get("/control/reports/bank-deposits", h.bank_deposits),
            web.get("/control/reports/bank-deposits/{batch_id}", h.bank_deposit),
            web.post("/control/reports/discrepancies", h.add_discrepancy),
            web.delete("/control/reports/discrepancies", h.clear_discrepancies),
            web.post("/control/reset", h.reset),
            *aiohttp_routes(health),
        ]
    )
    return app
