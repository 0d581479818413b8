"""The reconciler API's input handling: refusals as 4xx with a reason, and the parsers of path,
query and body parameters every handler shares (nothing a handler reads bypasses them)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import date
from typing import Any

from aiohttp import web
from backbone import bodies
from multidict import MultiMapping

from reconciler.domain.decisions import EXPORT_COLUMNS, ROWS_MAX, Decision, DecisionsRefused, parse_decisions


class BadRequest(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def json_response(status: int, body: Any) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, default=str))


def bulk(body: dict[str, Any]) -> list[Decision]:
    """A JSON selection: one decision for each case id, each its own act."""
    ids = body.get("case_ids")
    if not isinstance(ids, list) or not ids or len(ids) > ROWS_MAX:
        raise BadRequest(400, "bad_body", f"case_ids: 1-{ROWS_MAX} case ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids):
        raise BadRequest(400, "bad_body", "case_ids must be positive integers")
    columns = {
        "decision": body.get("decision"),
        "reason": body.get("reason"),
        "repair_type": body.get("repair_type"),
        "amount_minor": body.get("amount_minor"),
        "currency": body.get("currency"),
        "mt5_login": body.get("mt5_login"),
    }
    if not all(v is None or (isinstance(v, str | int) and not isinstance(v, bool)) for v in columns.values()):
        raise BadRequest(400, "bad_body", "decision fields must be strings or integers")
    rows = [
        {"case_id": i, "case_key": "", "case_class": "", "severity": "", "business_date": "", "status": "",
         "summary": "", **{k: "" if v is None else str(v) for k, v in columns.items()}}
        for i in ids
    ]  # fmt: skip  # packed: a few items a line read better than one each
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    try:
        return parse_decisions(out.getvalue())
    except DecisionsRefused as refused:
        raise BadRequest(400, "bad_body", refused.reason) from None


async def json_body(request: web.Request) -> dict[str, Any]:
    body = bodies.json_body(request)  # read, bounded and screened by backbone.http's guard
    if not isinstance(body, dict):
        raise BadRequest(400, "bad_body", "the body must be a JSON object")
    return body


def path_id(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    if not raw.isdigit() or len(raw) > 18:
        raise BadRequest(400, "bad_path", f"{name} must be a positive integer")
    return int(raw)


def query_date(raw: str | None) -> date | None:
    if raw is None:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadRequest(400, "bad_query", "date must be YYYY-MM-DD") from None


def query_limit(raw: str | None, maximum: int) -> int:
    if raw is None:
        return min(100, maximum)
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise BadRequest(400, "bad_query", f"limit must be an integer 1..{maximum}")
    return int(raw)


_PAYMENT_REF = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def payment_refs(query: MultiMapping[str]) -> list[str]:
    """``payment_id`` (ours) and ``provider_payment_id`` (the PSP's), each at most once: the cases
    naming either. A malformed or repeated one is 400 (nothing is read)."""
    refs: list[str] = []
    for name in ("payment_id", "provider_payment_id"):
        values = query.getall(name, [])
        if len(values) > 1 or any(_PAYMENT_REF.fullmatch(v) is None for v in values):
            raise BadRequest(400, "bad_query", f"{name}: once, letters, digits and _ . : - (1-100)")
        refs += values
    return refs
