"""The console's dead-letter pages and forms and its deposit search, in process: the real app and
gate, a fake store (operators, sessions, audit) and fake service APIs that record what they were
asked."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from backbone.health import Health
from backbone.settings import load_settings
from ops_console.application.auth import cookie_hash
from ops_console.application.ports import Refunded, ServiceError, Session
from ops_console.domain.operators import Operator
from ops_console.domain.permissions import Permission
from ops_console.entrypoints.web import COOKIE, Console
from ops_console.settings import ConsoleSettings

CARD = "4242424242424242"
LETTER: dict[str, Any] = {
    "id": 7,
    "consumer": "ledger",
    "topic": "payments.events",
    "kafka_partition": 3,
    "kafka_offset": 41,
    "message_key": "pay-1",
    "event_id": "0b0e7d7e-0000-4000-8000-000000000001",
    "event_type": "PaymentCaptured",
    "error_class": "handler_failed",
    "reason": "KeyError: <script>alert(1)</script>",
    "attempts": 5,
    "dead_lettered_at": "2026-12-02T10:00:00+00:00",
    "resolution": None,
    "resolved_at": None,
    "resolved_by": None,
    "resolution_note": None,
    "headers": {"event_id": "x"},
    "payload": {
        "decoded": True,
        "size_bytes": 120,
        "event_type": "PaymentCaptured",
        "document": {"merchant_id": "<b>m</b>", "note": f"card {CARD}"},
    },
}


class FakeStore:
    def __init__(self, operators: dict[str, Operator]) -> None:
        self.sessions = {cookie_hash(name): op for name, op in operators.items()}
        self.audits: list[tuple[str, str, str, str, str]] = []

    async def session(self, token_sha256: bytes) -> Session | None:
        op = self.sessions.get(token_sha256)
        return Session(op, "csrf-" + op.username, datetime.now(UTC) + timedelta(hours=1)) if op else None

    async def audit(
        self, operator: str, action: str, target: str, reason: str, outcome: str, detail: dict[str, Any]
    ) -> None:
        self.audits.append((operator, action, target, reason, outcome))

    async def ping(self) -> None:
        return None


class FakeApi:
    """A service's operator API: dead letters from ``letters``, other reads from ``reads`` (path →
    answer); a POST answers ``post_error`` or a replay's outcome. Every read is recorded."""

    def __init__(
        self,
        name: str,
        letters: list[dict[str, Any]],
        post_error: ServiceError | None = None,
        reads: dict[str, Any] | None = None,
    ):
        self.name, self.letters, self.post_error, self.reads = name, letters, post_error, reads or {}
        self.posts: list[tuple[str, str, dict[str, Any]]] = []
        self.gets: list[tuple[str, str, dict[str, str]]] = []

    async def get(self, operator: Operator, path: str, query: dict[str, str] | None = None) -> Any:
        self.gets.append((operator.username, path, dict(query or {})))
        if path in self.reads:
            answer = self.reads[path]
            return answer(operator, query or {}) if callable(answer) else answer
        if path == "/v1/dead-letters":
            return {"dead_letters": self.letters}
        for letter in self.letters:
            if path == f"/v1/dead-letters/{letter['consumer']}/{letter['id']}":
                return letter
        raise ServiceError(self.name, 404, "not_found", "no such dead letter")

    async def post(self, operator: Operator, path: str, body: dict[str, Any]) -> Any:
        self.posts.append((operator.username, path, body))
        if self.post_error is not None:
            raise self.post_error
        return {"outcome": "replayed", "applied": True}


def _operator(name: str, *grants: Permission) -> Operator:
    return Operator(name, name.title(), frozenset(grants), ("broker-eu",))


OPERATORS = {
    "alice": _operator("alice", Permission.VIEW, Permission.DEADLETTER_REPLAY),
    "carol": _operator("carol", Permission.VIEW),
    "rita": _operator("rita", Permission.VIEW, Permission.REFUND),
}


PAYMENT: dict[str, Any] = {
    "payment_id": "pay_1", "status": "CAPTURED", "amount_minor": 25000, "currency": "USD",
    "deposit_reference": "dep_1", "provider": "simpsp", "provider_payment_id": "pi_1", "operations": [],
    "allowed_actions": ["refund"], "refundable_minor": 25000,
}  # fmt: skip  # packed: a few items a line read better than one each


class FakePayments:
    """payment-state and mt5-credit's merchant APIs: one captured deposit of broker-eu."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.refunds: dict[str, tuple[str, str, dict[str, Any]]] = {}  # idempotency key -> request
        self.refund_error: ServiceError | None = None

    async def refund(self, merchant_id: str, payment_id: str, key: str, body: dict[str, Any]) -> Refunded:
        """payment-state's idempotency: the same key and request replays, another request is refused."""
        if self.refund_error is not None:
            raise self.refund_error
        if key in self.refunds:
            if self.refunds[key] != (merchant_id, payment_id, body):
                raise ServiceError(
                    "payment-state", 422, "idempotency_key_reused", "another request, same key"
                )
            return Refunded({"payment": PAYMENT}, replayed=True)
        self.refunds[key] = (merchant_id, payment_id, body)
        return Refunded({"payment": PAYMENT}, replayed=False)

    async def payment(self, merchant_id: str, payment_id: str) -> dict[str, Any] | None:
        self.asked.append((merchant_id, payment_id))
        return dict(PAYMENT) if merchant_id == "broker-eu" and payment_id == "pay_1" else None

    async def payments_by_psp_reference(self, merchant_id: str, reference: str) -> list[dict[str, Any]]:
        self.asked.append((merchant_id, reference))
        return [dict(PAYMENT)] if merchant_id == "broker-eu" and reference == "pi_1" else []

    async def deposit_intent(self, merchant_id: str, deposit_reference: str) -> dict[str, Any] | None:
        if merchant_id != "broker-eu" or deposit_reference not in ("dep_1", "dep_uncaptured"):
            return None
        credit = {
            "kind": "credit",
            "status": "done",
            "payment_id": "pay_1",
            "credit_id": 1,
            "amount_minor": 25000,
            "currency": "USD",
            "deal_ticket": 9,
            "last_reason": "",
        }
        return {
            "deposit_reference": deposit_reference,
            "customer_id": "cust-1",
            "mt5_login": 7401,
            "amount_minor": 25000,
            "currency": "USD",
            "credits": [credit] if deposit_reference == "dep_1" else [],
        }


def _login_deposits(operator: Operator, query: dict[str, str]) -> dict[str, Any]:
    """mt5-credit's deposits on login 7401: one captured (pay_1), one not yet; broker-eu's only."""
    if query.get("mt5_login") != "7401" or "broker-eu" not in operator.merchants:
        return {"mt5_login": int(query.get("mt5_login", "0")), "deposits": []}
    waiting = {"deposit_reference": "dep_uncaptured", "merchant_id": "broker-eu", "customer_id": "cust-1",
               "mt5_login": 7401, "amount_minor": 1000, "currency": "USD",
               "created_at": "2026-12-02T10:00:00+00:00", "credits": []}  # fmt: skip  # aligned
    credited = {
        **waiting,
        "deposit_reference": "dep_1",
        "amount_minor": 25000,
        "credits": [{"kind": "credit", "status": "done", "payment_id": "pay_1"}],
    }
    return {"mt5_login": 7401, "deposits": [waiting, credited]}


def run(
    scenario: Callable[[TestClient, FakeStore, FakeApi], Awaitable[None]],
    post_error: ServiceError | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    settings = load_settings(
        ConsoleSettings,
        {
            "DATABASE_URL": "postgresql://unused",
            "CONSOLE_RECONCILER_URL": "http://x",
            "CONSOLE_RECONCILER_TOKEN": "t",
        },
    )
    store = FakeStore(OPERATORS)
    ledger = FakeApi("ledger", [LETTER], post_error, {"/v1/journals": {"journals": []}})
    parts = {
        "reconciler": FakeApi("reconciler", [], reads={"/v1/cases": {"cases": []}}),
        "credit": FakeApi("mt5-credit", [], reads={"/v1/deposits": _login_deposits}),
        "ledger": ledger,
        **(extra or {}),
    }
    payments = parts.pop("payments", None) or FakePayments()
    console = Console(settings, store, payments=payments, health=Health(), **parts)  # type: ignore[arg-type]

    async def go() -> None:
        async with TestClient(TestServer(console.app())) as client:
            await scenario(client, store, ledger)

    asyncio.run(go())


def _as(name: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={name}"}


PAGE = "/deadletters/ledger/ledger/7"


def test_list_and_letter_pages_show_the_letter_escaped_and_card_safe() -> None:
    """The list shows each service's letters (topic, partition, offset, error); the letter's page
    shows them beside the payload; markup from a service is escaped, a card number is redacted
    (even when a service forgot), and an operator with view only gets no replay form."""

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        listed = await client.get("/deadletters", headers=_as("carol"))
        text = await listed.text()
        assert listed.status == 200
        assert 'href="/deadletters/ledger/ledger/7"' in text and "payments.events / 3 / 41" in text
        assert "<script>" not in text and "&lt;script&gt;" in text
        page = await client.get(PAGE, headers=_as("carol"))
        text = await page.text()
        assert page.status == 200
        assert CARD not in text and "[redacted]" in text
        assert "&lt;b&gt;m&lt;/b&gt;" in text or "\\u003cb\\u003e" in text
        assert 'id="replay"' not in text and "needs the deadletter_replay permission" in text
        mine = await client.get(PAGE, headers=_as("alice"))
        assert 'id="replay"' in await mine.text() and 'id="discard"' in await mine.text()
        bad = await client.get("/deadletters?service=nowhere", headers=_as("carol"))
        assert bad.status == 400 and "service must be one of" in await bad.text()
        missing = await client.get("/deadletters/ledger/ledger/8", headers=_as("carol"))
        assert missing.status == 404

    run(scenario)


def test_replay_needs_the_permission_a_reason_and_the_csrf_token() -> None:
    """Without deadletter_replay: 403 and an audit entry, nothing sent. Without a reason: the page
    again with a specific error (400), audited as refused, nothing sent. A stale CSRF token: 403.
    With all of it: the service is asked once for that operator with the reason, the act audited,
    and the browser redirected to the letter with a done-message."""

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        form = {"csrf": "csrf-carol", "reason": "fixed"}
        refused = await client.post(f"{PAGE}/replay", data=form, headers=_as("carol"))
        assert refused.status == 403 and "deadletter_replay" in await refused.text()
        assert store.audits[-1][:2] == ("carol", "forbidden") and ledger.posts == []

        empty = await client.post(
            f"{PAGE}/replay", data={"csrf": "csrf-alice", "reason": " "}, headers=_as("alice")
        )
        assert empty.status == 400 and "reason: say why" in await empty.text()
        assert store.audits[-1][1:] == (
            "replay_dead_letter",
            "deadletter:ledger/ledger/7",
            "reason: say why, 1-500 characters",
            "refused",
        )
        assert ledger.posts == []

        stale = await client.post(
            f"{PAGE}/discard", data={"csrf": "old", "reason": "x"}, headers=_as("alice")
        )
        assert stale.status == 403 and ledger.posts == []

        done = await client.post(
            f"{PAGE}/replay", data={"csrf": "csrf-alice", "reason": "fixed in 1.2"}, headers=_as("alice"),
            allow_redirects=False,
        )  # fmt: skip  # packed: a few items a line read better than one each
        assert done.status == 303 and done.headers["Location"] == f"{PAGE}?done=dl_replayed"
        assert ledger.posts == [("alice", "/v1/dead-letters/ledger/7/replay", {"reason": "fixed in 1.2"})]
        assert store.audits[-1] == (
            "alice",
            "replay_dead_letter",
            "deadletter:ledger/ledger/7",
            "fixed in 1.2",
            "ok",
        )
        shown = await client.get(f"{PAGE}?done=dl_replayed", headers=_as("alice"))
        assert "Dead letter replayed" in await shown.text()

    run(scenario)


def test_a_service_refusal_is_shown_as_the_service_said_it_and_audited() -> None:
    """The service answers 409 (already replayed, e.g. by someone else a moment ago): the page says
    so next to the letter, with that status, and the audit records the refusal and its reason."""

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        answer = await client.post(
            f"{PAGE}/discard", data={"csrf": "csrf-alice", "reason": "junk"}, headers=_as("alice")
        )
        text = await answer.text()
        assert answer.status == 409
        assert re.search(r"The ledger refused: this dead letter was already replayed", text)
        assert store.audits[-1][1] == "discard_dead_letter" and store.audits[-1][4] == "refused"

    run(scenario, ServiceError("ledger", 409, "already_resolved", "this dead letter was already replayed"))


def test_a_deposit_is_found_by_its_deposit_reference_under_the_operators_merchants_only() -> None:
    """A deposit reference finds the payment its credit row names, with the same story as its
    payment id; a reference before the capture (no credit row names a payment yet) or of another
    merchant finds nothing and says so; markup in the query is refused with a specific error."""
    OPERATORS["erin"] = Operator("erin", "Erin", frozenset({Permission.VIEW}), ("another-merchant",))

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        by_ref = await (await client.get("/search?q=dep_1", headers=_as("carol"))).text()
        by_id = await (await client.get("/search?q=pay_1", headers=_as("carol"))).text()
        assert "pay_1" in by_ref and "CAPTURED" in by_ref and "250.00 USD" in by_ref
        assert by_ref.count('class="card story"') == by_id.count('class="card story"') == 1
        early = await (await client.get("/search?q=dep_uncaptured", headers=_as("carol"))).text()
        assert "No deposit named dep_uncaptured under your merchants (broker-eu)" in early
        other = await (await client.get("/search?q=dep_1", headers=_as("erin"))).text()
        assert "No deposit named dep_1" in other and "CAPTURED" not in other
        bad = await client.get("/search?q=<b>x</b>", headers=_as("carol"))
        assert bad.status == 400
        assert "letters, digits" in await bad.text() and "<b>x</b>" not in await bad.text()

    try:
        run(scenario)
    finally:
        del OPERATORS["erin"]


def test_a_deposit_is_found_by_its_psp_reference_and_a_login_by_its_deposits() -> None:
    """The PSP's payment id (pi_…) finds the payment of the operator's merchant (payment-state asked
    with that merchant's token only); an MT5 login lists its deposits: the captured one with its
    story, the one not captured yet in its own table; mt5-credit is asked for the operator with
    their merchants; another merchant's operator finds neither; a login too big for MT5 is refused
    with a reason and nothing is asked."""
    OPERATORS["erin"] = Operator("erin", "Erin", frozenset({Permission.VIEW}), ("another-merchant",))
    credit = FakeApi("mt5-credit", [], reads={"/v1/deposits": _login_deposits})

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        by_pi = await client.get("/search?q=pi_1", headers=_as("carol"))
        text = await by_pi.text()
        assert by_pi.status == 200 and text.count('class="card story"') == 1 and "pay_1" in text
        by_login = await (await client.get("/search?q=7401", headers=_as("carol"))).text()
        assert by_login.count('class="card story"') == 1 and "pay_1" in by_login
        waiting = by_login.split('id="waiting"')[1].split("</section>")[0]
        assert "dep_uncaptured" in waiting and "10.00 USD" in waiting and "pay_1" not in waiting
        assert credit.gets == [("carol", "/v1/deposits", {"mt5_login": "7401", "limit": "10"})]
        nothing = await (await client.get("/search?q=7401", headers=_as("erin"))).text()
        assert "No deposit on MT5 login 7401 under your merchants (another-merchant)" in nothing
        assert "pay_1" not in nothing
        other = await (await client.get("/search?q=pi_1", headers=_as("erin"))).text()
        assert "No deposit named pi_1" in other and "CAPTURED" not in other
        asked = len(credit.gets)
        too_big = await client.get(f"/search?q={2**63}", headers=_as("carol"))
        assert too_big.status == 400 and "An MT5 login is at most" in await too_big.text()
        assert len(credit.gets) == asked

    try:
        run(scenario, extra={"credit": credit})
    finally:
        del OPERATORS["erin"]


RECEIPT = {"receipt_id": 3, "provider": "simpsp", "provider_event_id": "evt_<i>1</i>",
           "provider_event_type": "payment_intent.succeeded", "provider_payment_id": "pi_1",
           "signature_result": "verified", "signature_secret": "previous", "card_data_redacted": True,
           "received_at": "2026-12-02T10:00:01+00:00", "request_id": "req_1"}  # fmt: skip  # aligned
CASE = {"id": 41, "case_class": "not_credited", "status": "open", "business_date": "2026-12-02",
        "summary": "captured <script>x</script> not credited", "severity": "high",
        "merchant_id": "broker-eu"}  # fmt: skip  # continuation aligned under its bracket


def test_a_deposits_story_shows_its_webhooks_and_cases_side_by_side() -> None:
    """The story shows the webhooks the gateway received for the payment's PSP id (event, type,
    signature result and secret, card data redacted) and the reconciler's cases naming it (linked,
    escaped); each service is asked for that payment only, for the operator; a gateway that does
    not answer is a note on the story, the rest still shown; one not configured is said."""
    gateway = FakeApi("webhook gateway", [], reads={"/v1/receipts": {"receipts": [RECEIPT]}})
    recon = FakeApi("reconciler", [], reads={"/v1/cases": {"cases": [CASE]}})

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        page = await (await client.get("/search?q=pay_1", headers=_as("carol"))).text()
        webhooks = page.split('id="webhooks"')[1].split("</section>")[0]
        assert "evt_&lt;i&gt;1&lt;/i&gt;" in webhooks and "payment_intent.succeeded" in webhooks
        assert "verified" in webhooks and "previous secret" in webhooks and "card data redacted" in webhooks
        found_cases = page.split('id="cases"')[1].split("</section>")[0]
        assert 'href="/cases/41"' in found_cases and "not_credited" in found_cases
        assert "&lt;script&gt;" in found_cases and "<script>" not in found_cases
        receipts_of = {"provider": "simpsp", "provider_payment_id": "pi_1", "limit": "50"}
        assert gateway.gets == [("carol", "/v1/receipts", receipts_of)]
        cases_of = {"payment_id": "pay_1", "provider_payment_id": "pi_1", "limit": "50"}
        assert recon.gets == [("carol", "/v1/cases", cases_of)]
        gateway.reads["/v1/receipts"] = _unavailable
        down = await (await client.get("/search?q=pay_1", headers=_as("carol"))).text()
        assert "The webhook gateway did not answer (ConnectionRefused); nothing was changed." in down
        assert 'href="/cases/41"' in down and "CAPTURED" in down

    run(scenario, extra={"gateway": gateway, "reconciler": recon})

    async def unconfigured(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        page = await (await client.get("/search?q=pay_1", headers=_as("carol"))).text()
        assert "Webhooks: the webhook gateway is not configured (CONSOLE_GATEWAY_URL)." in page

    run(unconfigured)


def _unavailable(operator: Operator, query: dict[str, str]) -> Any:
    raise ServiceError("webhook gateway", 503, "unavailable", "ConnectionRefused")


def test_payment_states_dead_letters_are_listed_with_the_others_and_replayed_there() -> None:
    """With payment-state's operator API configured, its consumer's letters are listed beside the
    ledger's (each service asked for the operator), a letter's page is served from payment-state,
    and a replay is sent there with the reason; a service filter keeps to that service."""
    letter = {**LETTER, "id": 9, "consumer": "payment-state-inbound", "topic": "psp.provider-events"}
    payments = FakeApi("payment-state", [letter])

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        listed = await (await client.get("/deadletters", headers=_as("carol"))).text()
        assert 'href="/deadletters/payment-state/payment-state-inbound/9"' in listed
        assert 'href="/deadletters/ledger/ledger/7"' in listed and "psp.provider-events / 3 / 41" in listed
        only = await (await client.get("/deadletters?service=payment-state", headers=_as("carol"))).text()
        assert "payment-state-inbound/9" in only and "/deadletters/ledger/ledger/7" not in only
        page = await client.get("/deadletters/payment-state/payment-state-inbound/9", headers=_as("alice"))
        assert page.status == 200 and 'id="replay"' in await page.text()
        form = {"csrf": "csrf-alice", "reason": "parser fixed"}
        path = "/deadletters/payment-state/payment-state-inbound/9/replay"
        done = await client.post(path, data=form, headers=_as("alice"), allow_redirects=False)
        assert done.status == 303
        assert payments.posts == [
            ("alice", "/v1/dead-letters/payment-state-inbound/9/replay", {"reason": "parser fixed"})
        ]
        assert ledger.posts == []

    run(scenario, extra={"payment_ops": payments})


def _nonce(page: str) -> str:
    found = re.search(r'name="nonce" value="([0-9a-f]{32})"', page)
    assert found is not None, "the refund form carries its nonce"
    return found.group(1)


def test_a_refund_needs_the_permission_and_good_values_and_a_double_submit_is_one_refund() -> None:
    """Without refund: no form and a POST is 403 + audit, nothing sent. With it: a bad amount, an
    amount above what is refundable, no reason or a forged nonce are errors on the deposit's page
    (400), audited, nothing sent; another merchant's payment is 404, never asked for; a good form is
    one refund at payment-state (the merchant's, the amount in minor units, who and why) and the
    same form posted again is answered as the same refund (same key), not a second; audited ok."""
    payments = FakePayments()

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        carol = await (await client.get("/search?q=pay_1", headers=_as("carol"))).text()
        assert "Refunds need the refund permission." in carol and 'name="nonce"' not in carol
        form = {
            "csrf": "csrf-carol",
            "merchant": "broker-eu",
            "amount": "100.00",
            "reason": "x",
            "nonce": "0" * 32,
        }
        refused = await client.post("/payments/pay_1/refund", data=form, headers=_as("carol"))
        assert refused.status == 403 and store.audits[-1][:3] == (
            "carol",
            "forbidden",
            "/payments/pay_1/refund",
        )

        page = await (await client.get("/search?q=pay_1", headers=_as("rita"))).text()
        assert 'id="refund-pay_1"' in page and 'value="250.00"' in page
        nonce = _nonce(page)
        good = {
            "csrf": "csrf-rita",
            "merchant": "broker-eu",
            "amount": "100.00",
            "reason": "client asked",
            "nonce": nonce,
        }
        for change, why in (
            ({"amount": "abc"}, "amount: a number such as 500.00"),
            ({"amount": "300.00"}, "amount: at most 250.00 USD can be refunded"),
            ({"amount": "0.001"}, "amount:"),
            ({"reason": "  "}, "reason: say why"),
            ({"nonce": "forged"}, "the refund form is stale or forged"),
        ):
            bad = await client.post("/payments/pay_1/refund", data={**good, **change}, headers=_as("rita"))
            text = await bad.text()
            assert bad.status == 400 and why in text, (change, text[:300])
            assert store.audits[-1][1:3] == ("refund", "payment:pay_1") and store.audits[-1][4] == "refused"
        assert payments.refunds == {}
        other = await client.post("/payments/pay_1/refund", data={**good, "merchant": "another-merchant"},
                                  headers=_as("rita"))  # fmt: skip  # continuation aligned under its bracket
        assert other.status == 404 and ("another-merchant", "pay_1") not in payments.asked

        done = await client.post(
            "/payments/pay_1/refund", data=good, headers=_as("rita"), allow_redirects=False
        )
        assert done.status == 303 and done.headers["Location"] == "/search?q=pay_1&done=refunded"
        [(key, request)] = payments.refunds.items()
        assert key.startswith("console-refund-") and request == (
            "broker-eu",
            "pay_1",
            {"amount_minor": 10000, "currency": "USD", "reason": "rita (ops console): client asked"},
        )
        assert store.audits[-1] == ("rita", "refund", "payment:pay_1", "client asked", "ok")
        twice = await client.post(
            "/payments/pay_1/refund", data=good, headers=_as("rita"), allow_redirects=False
        )
        assert (
            twice.headers["Location"] == "/search?q=pay_1&done=refund_replayed" and len(payments.refunds) == 1
        )
        shown = await (await client.get("/search?q=pay_1&done=refund_replayed", headers=_as("rita"))).text()
        assert "it was not asked for again" in shown and _nonce(shown) != nonce
        changed = await client.post(
            "/payments/pay_1/refund", data={**good, "amount": "50.00"}, headers=_as("rita")
        )
        assert (
            changed.status == 422
            and "The payment-state refused: another request, same key" in await changed.text()
        )
        assert len(payments.refunds) == 1

    run(scenario, extra={"payments": payments})


def test_a_refund_without_an_answer_keeps_the_form_so_sending_it_again_is_the_same_refund() -> None:
    """payment-state does not answer: the page says the refund may have been made, is audited as
    failed, and draws the same form again with the same nonce (the same key: sending it again
    cannot make a second refund); a refusal (4xx) is shown as payment-state said it, new nonce."""
    payments = FakePayments()

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        nonce = _nonce(await (await client.get("/search?q=pay_1", headers=_as("rita"))).text())
        form = {
            "csrf": "csrf-rita",
            "merchant": "broker-eu",
            "amount": "20.00",
            "reason": "dup",
            "nonce": nonce,
        }
        payments.refund_error = ServiceError("payment-state", 503, "unavailable", "ServerDisconnectedError")
        lost = await client.post("/payments/pay_1/refund", data=form, headers=_as("rita"))
        text = await lost.text()
        assert lost.status == 502 and "the refund may have been made" in text and _nonce(text) == nonce
        assert 'value="20.00"' in text and store.audits[-1][4] == "failed"
        payments.refund_error = ServiceError(
            "payment-state", 409, "invalid_state", "the payment is not captured"
        )
        refused = await client.post("/payments/pay_1/refund", data=form, headers=_as("rita"))
        text = await refused.text()
        assert refused.status == 409 and "The payment-state refused: the payment is not captured" in text
        assert _nonce(text) != nonce and store.audits[-1][4] == "refused"

    run(scenario, extra={"payments": payments})


def test_withdrawals_are_shown_of_the_operators_merchants_only() -> None:
    """mt5-credit is asked for the operator (it scopes by their merchants); should it answer with
    another merchant's withdrawal anyway, the console does not show it: not in the list, and its
    page is 404 with no forms."""
    mine, theirs = "wd_" + "a" * 32, "wd_" + "b" * 32
    row = {"customer_id": "c", "mt5_login": 7401, "amount_minor": 500, "currency": "USD", "status": "held",
           "prepared_by": None, "approved_by": None}  # fmt: skip  # continuation aligned under its bracket
    one = {**row, "destination_token": "pm_card_visa", "held_minor": 500, "source_payment_id": "pay_1",
           "approval_required": True, "command_digest": None, "last_reason": None, "payout_failure": None,
           "created_at": "2026-12-02T10:00:00+00:00", "updated_at": "2026-12-02T10:00:00+00:00",
           "debit": None, "give_back": None}  # fmt: skip  # continuation aligned under its bracket
    listed = [{**row, "withdrawal_id": mine, "merchant_id": "broker-eu"},
              {**row, "withdrawal_id": theirs, "merchant_id": "another-merchant"}]  # fmt: skip  # aligned
    credit = FakeApi("mt5-credit", [], reads={
        "/v1/withdrawals": {"withdrawals": listed},
        f"/v1/withdrawals/{mine}": {**one, "withdrawal_id": mine, "merchant_id": "broker-eu"},
        f"/v1/withdrawals/{theirs}": {**one, "withdrawal_id": theirs, "merchant_id": "another-merchant"},
    })  # fmt: skip  # packed: a few items a line read better than one each

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        listed = await (await client.get("/withdrawals", headers=_as("carol"))).text()
        assert mine in listed and theirs not in listed and "broker-eu" in listed
        assert (await client.get(f"/withdrawals/{mine}", headers=_as("carol"))).status == 200
        hidden = await client.get(f"/withdrawals/{theirs}", headers=_as("carol"))
        assert hidden.status == 404 and 'id="prepare"' not in await hidden.text()

    run(scenario, extra={"credit": credit})


def test_a_nul_in_a_query_or_a_form_is_refused_before_any_page() -> None:
    """A NUL character (which PostgreSQL's text cannot hold) in a query filter or a form's value is
    refused (400 nul_character, backbone.http's guard) before any page reads it or the store is
    asked: nothing is recorded or sent."""

    async def scenario(client: TestClient, store: FakeStore, ledger: FakeApi) -> None:
        audits = list(store.audits)
        listed = await client.get("/audit?target=%00", headers=_as("alice"))
        assert listed.status == 400 and "nul_character" in await listed.text()
        form = {"csrf": "csrf-alice", "reason": "no\x00pe"}
        acted = await client.post(f"{PAGE}/replay", data=form, headers=_as("alice"))
        assert acted.status == 400 and ledger.posts == []
        login = await client.post("/login", data={"username": "a\x00", "password": "p", "csrf": "x"})
        assert login.status == 400
        assert store.audits == audits

    run(scenario)
