"""The PSP's reports from its API, Stripe-like: create a report run for the business date, then
download its file (aiohttp). Any failure is ``Unavailable`` with the reason, never an empty file."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Final

import aiohttp

from reconciler.application.ports import Unavailable
from reconciler.domain.reports import ReportType

REPORT_TYPES: Final[dict[str, str]] = {
    "settlement": "settlement.itemized",
    "bank_deposits": "payouts.bank_deposits",
}
FILE_BYTES_MAX: Final = 1024 * 1024 * 1024


class PspReportSource:
    def __init__(self, provider: str, base_url: str, api_key: str, timeout_s: float) -> None:
        self._provider, self._base, self._key, self._timeout = (
            provider,
            base_url.rstrip("/"),
            api_key,
            timeout_s,
        )

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def report_types(self) -> tuple[ReportType, ...]:
        return ("settlement", "bank_deposits")

    def fetch(self, report_type: ReportType, business_date: date) -> bytes | Unavailable:
        return asyncio.run(self._fetch(report_type, business_date))

    async def _fetch(self, report_type: ReportType, business_date: date) -> bytes | Unavailable:
        headers = {"Authorization": f"Bearer {self._key}"}
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        body = {
            "report_type": REPORT_TYPES[report_type],
            "parameters": {"business_date": business_date.isoformat()},
        }
        try:
            async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
                async with session.post(f"{self._base}/v1/reporting/report_runs", json=body) as response:
                    if response.status != 200:
                        return Unavailable(f"report run: http_{response.status}")
                    run = await response.json()
                if run.get("status") != "succeeded":
                    return Unavailable(f"report run {run.get('id')} is {run.get('status')}")
                url = str(run["result"]["url"])
                async with session.get(f"{self._base}{url}") as response:
                    if response.status != 200:
                        return Unavailable(f"report file: http_{response.status}")
                    if (response.content_length or 0) > FILE_BYTES_MAX:
                        return Unavailable("report file larger than 1 GiB")
                    return await response.read()
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            return Unavailable(f"{type(exc).__name__}: {exc}"[:200])
