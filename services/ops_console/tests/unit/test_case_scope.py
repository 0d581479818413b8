"""The merchant scope of cases in the console, in process (the real app and gate, fake services):
should the reconciler answer with a case of another merchant or of no merchant anyway, the case
queue, the UNKNOWN report and a deposit's story do not show it and its page is 404; an operator of
every merchant (``*``) sees every case, and a deposit search runs under every merchant the console
holds a token for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from backbone.health import Health
from backbone.settings import load_settings
from ops_console.application.auth import cookie_hash
from ops_console.application.ports import ServiceError, Session
from ops_console.domain.operators import Operator
from ops_console.domain.permissions import Permission
from ops_console.entrypoints.web import COOKIE, Console
from ops_console.settings import ConsoleSettings

OPERATORS = {
    "xena": Operator("xena", "Xena", frozenset({Permission.VIEW}), ("m1",)),
    "root": Operator("root", "Root", frozenset({Permission.VIEW}), ("*",)),
}
AT = "2026-12-02T10:00:00+00:00"
ROW = {"status": "open", "business_date": "2026-12-02", "severity": "high", "summary": "s",
       "opened_at": AT, "updated_at": AT, "reopened": 0}  # fmt: skip  # aligned under its bracket
CASES = [
    {**ROW, "id": 11, "case_class": "stale_operation", "merchant_id": "m1"},
    {**ROW, "id": 12, "case_class": "stale_operation", "merchant_id": "m2"},
    {**ROW, "id": 13, "case_class": "stale_operation", "merchant_id": None},
]
PAYMENT = {"payment_id": "pay_1", "status": "CAPTURED", "amount_minor": 100, "currency": "USD",
           "deposit_reference": None, "provider": "simpsp", "provider_payment_id": "pi_1",
           "operations": [], "allowed_actions": [], "refundable_minor": 0}  # fmt: skip  # aligned


class FakeStore:
    def __init__(self) -> None:
        self.audits: list[tuple[str, str, str, str, str]] = []

    async def session(self, token_sha256: bytes) -> Session | None:
        found = [op for name, op in OPERATORS.items() if cookie_hash(name) == token_sha256]
        return Session(found[0], "csrf", datetime.now(UTC) + timedelta(hours=1)) if found else None

    async def audit(self, operator: str, action: str, target: str, reason: str, outcome: str, _: Any) -> None:
        self.audits.append((operator, action, target, reason, outcome))

    async def ping(self) -> None:
        return None


class CarelessReconciler:
    """A reconciler that answers with every case whoever asks (as if it had no scope)."""

    async def get(self, operator: Operator, path: str, query: dict[str, str] | None = None) -> Any:
        if path == "/v1/cases":
            return {"cases": CASES}
        if path == "/v1/audit":
            return {"audit": []}
        for case in CASES:
            if path == f"/v1/cases/{case['id']}":
                return {**case, "evidence": {}, "history": [], "repairs": []}
        raise ServiceError("reconciler", 404, "not_found", "no such case")

    async def post(self, operator: Operator, path: str, body: dict[str, Any]) -> Any:
        raise AssertionError("nothing is posted here")


class Payments:
    """payment-state with tokens for m1 and m2; pay_1 is m2's."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def merchants(self) -> tuple[str, ...]:
        return ("m1", "m2")

    async def payment(self, merchant_id: str, payment_id: str) -> dict[str, Any] | None:
        self.asked.append((merchant_id, payment_id))
        return dict(PAYMENT) if (merchant_id, payment_id) == ("m2", "pay_1") else None

    async def payments_by_psp_reference(self, merchant_id: str, reference: str) -> list[dict[str, Any]]:
        return []

    async def deposit_intent(self, merchant_id: str, deposit_reference: str) -> dict[str, Any] | None:
        return None


def run(scenario: Callable[[TestClient, Payments], Awaitable[None]]) -> None:
    env = {
        "DATABASE_URL": "postgresql://unused",
        "CONSOLE_RECONCILER_URL": "http://x",
        "CONSOLE_RECONCILER_TOKEN": "t",
    }
    settings = load_settings(ConsoleSettings, env)
    store, reconciler, payments = FakeStore(), CarelessReconciler(), Payments()
    console = Console(settings, store, reconciler, payments, Health())  # type: ignore[arg-type]

    async def go() -> None:
        async with TestClient(TestServer(console.app())) as client:
            await scenario(client, payments)

    asyncio.run(go())


def _as(name: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={name}"}


def test_the_console_shows_an_operator_their_merchants_cases_only() -> None:
    """xena (m1): the queue and the UNKNOWN report list case 11 only, case 12 (m2) and case 13 (no
    merchant) are 404 though the reconciler answered with them; root (every merchant) lists and
    opens all three, the case of no merchant said as such."""

    async def scenario(client: TestClient, _: Payments) -> None:
        for page in ("/cases", "/unknowns"):
            text = await (await client.get(page, headers=_as("xena"))).text()
            assert 'href="/cases/11"' in text, page
            assert 'href="/cases/12"' not in text and 'href="/cases/13"' not in text, page
            every = await (await client.get(page, headers=_as("root"))).text()
            assert all(f'href="/cases/{n}"' in every for n in (11, 12, 13)), page
        assert (await client.get("/cases/11", headers=_as("xena"))).status == 200
        for hidden in (12, 13):
            assert (await client.get(f"/cases/{hidden}", headers=_as("xena"))).status == 404
        nobodys = await client.get("/cases/13", headers=_as("root"))
        assert nobodys.status == 200 and "no merchant (operators of every merchant)" in await nobodys.text()

    run(scenario)


def test_an_operator_of_every_merchant_searches_under_every_merchant_token() -> None:
    """A payment id is looked up under each merchant the console holds a token for when the
    operator has every merchant; an operator of m1 asks under m1 only and finds nothing of m2's."""

    async def scenario(client: TestClient, payments: Payments) -> None:
        text = await (await client.get("/search?q=pay_1", headers=_as("root"))).text()
        assert "CAPTURED" in text and ("m2", "pay_1") in payments.asked
        payments.asked.clear()
        text = await (await client.get("/search?q=pay_1", headers=_as("xena"))).text()
        assert "No deposit named pay_1 under your merchants (m1)" in text
        assert {merchant for merchant, _ in payments.asked} == {"m1"}

    run(scenario)
