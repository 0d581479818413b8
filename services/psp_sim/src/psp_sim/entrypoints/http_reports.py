"""The PSP API's report runs, Stripe-like: ``POST /v1/reporting/report_runs`` for a report type and
business date, the run read back, and its file's contents as CSV. The simulator's runs succeed at
once; the files are computed by the control service (``ReportFiles``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final, Protocol

from aiohttp import web

from psp_sim.entrypoints.http_input import error_response, prepare_body


class ReportFiles(Protocol):
    """What the report endpoints read (the control service computes the files)."""

    async def settlement_csv(self, day: dt.date, seed: str | None) -> str: ...

    async def bank_csv(self, day: dt.date, seed: str | None, batch_id: str | None = None) -> str: ...


REPORT_TYPES: Final = {"settlement.itemized": "settlement", "payouts.bank_deposits": "bank_deposits"}


def _report_run(kind: str, day: dt.date) -> dict[str, Any]:
    report_type = next(k for k, v in REPORT_TYPES.items() if v == kind)
    file_id = f"file_{kind}_{day:%Y%m%d}"
    return {
        "id": f"frr_{kind}_{day:%Y%m%d}",
        "object": "reporting.report_run",
        "report_type": report_type,
        "parameters": {"business_date": day.isoformat()},
        "status": "succeeded",
        "result": {"id": file_id, "object": "file", "url": f"/v1/files/{file_id}/contents"},
    }


class ReportRuns:
    """The handlers of ``/v1/reporting/report_runs…`` and ``/v1/files/{id}/contents``."""

    def __init__(self, reports: ReportFiles | None) -> None:
        self._reports = reports

    async def create_report_run(self, request: web.Request) -> web.StreamResponse:
        document = prepare_body(await request.read(), request.content_type)
        if isinstance(document, web.Response):
            return document
        kind = REPORT_TYPES.get(str(document.get("report_type")))
        params = document.get("parameters")
        day = _report_date(params.get("business_date") if isinstance(params, dict) else None)
        if kind is None:
            return error_response(
                400,
                "invalid_request_error",
                "parameter_invalid",
                f"report_type must be one of {', '.join(REPORT_TYPES)}.",
                param="report_type",
            )
        if day is None:
            return error_response(
                400,
                "invalid_request_error",
                "parameter_invalid",
                "parameters.business_date must be a date YYYY-MM-DD.",
                param="parameters.business_date",
            )
        return web.json_response(_report_run(kind, day))

    async def retrieve_report_run(self, request: web.Request) -> web.StreamResponse:
        parsed = _parse_report_id(request.match_info["id"], "frr_")
        if parsed is None:
            return error_response(404, "invalid_request_error", "resource_missing", "No such report run.")
        return web.json_response(_report_run(*parsed))

    async def file_contents(self, request: web.Request) -> web.StreamResponse:
        parsed = _parse_report_id(request.match_info["id"], "file_")
        if parsed is None or self._reports is None:
            return error_response(404, "invalid_request_error", "resource_missing", "No such file.")
        kind, day = parsed
        if kind == "settlement":
            text = await self._reports.settlement_csv(day, None)
        else:
            text = await self._reports.bank_csv(day, None)
        return web.Response(body=text.encode(), content_type="text/csv", charset="utf-8")


def _report_date(value: object) -> dt.date | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


def _parse_report_id(value: str, prefix: str) -> tuple[str, dt.date] | None:
    """(kind, date) from ``frr_<kind>_<YYYYMMDD>`` / ``file_<kind>_<YYYYMMDD>``."""
    if not value.startswith(prefix):
        return None
    kind, _, stamp = value[len(prefix) :].rpartition("_")
    if kind not in REPORT_TYPES.values() or len(stamp) != 8 or not stamp.isdigit():
        return None
    try:
        return kind, dt.datetime.strptime(stamp, "%Y%m%d").date()
    except ValueError:
        return None
