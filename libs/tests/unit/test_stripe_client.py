"""Provider ``stripe`` over real HTTP against a scripted local server: what we send (the
Idempotency-Key, manual capture, our metadata, exactly one request per call: the SDK's retries are
off) and how every kind of answer maps onto the closed results shared with simpsp.

stripe-mock (the contract tests) answers every valid request with success; the errors Stripe sends
(card declines, idempotency errors, 5xx, 429, silence) are scripted here from Stripe's documented
error shapes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from backbone.psp import Absent, Applied, Conflict, Declined, Found, NoAnswer, Refused
from backbone.psp.stripe_client import StripeClient


def intent(**overrides: Any) -> dict[str, Any]:
    """A payment intent as Stripe documents it (API reference, "The PaymentIntent object")."""
    document: dict[str, Any] = {
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "object": "payment_intent",
        "amount": 2000,
        "amount_capturable": 2000,
        "amount_received": 0,
        "capture_method": "manual",
        "currency": "eur",
        "created": 1680800504,
        "status": "requires_capture",
        "metadata": {"reference": "pay_1", "payment_id": "pay_1"},
        "payment_method": "pm_1MtwBwLkdIwHu7ixik1ZeFq0",
        "latest_charge": "ch_3MtwBwLkdIwHu7ix28a3tqPa",
        "last_payment_error": None,
        "next_action": None,
        "cancellation_reason": None,
        "canceled_at": None,
        "livemode": False,
    }
    document.update(overrides)
    return document


@dataclass
class Script:
    """The answers the server gives, in order (the last one repeats), and what it received."""

    answers: list[tuple[int, Any]] = field(default_factory=list)
    hang_s: float = 0.0
    received: list[tuple[str, str, dict[str, str], dict[str, list[str]]]] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[tuple[Script, str]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode()) if length else {}
            script.received.append((self.command, self.path, dict(self.headers.items()), form))
            if script.hang_s:
                time.sleep(script.hang_s)
            status, body = script.answers[min(len(script.received), len(script.answers)) - 1]
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's naming

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield script, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def client(base_url: str, timeout_ms: int = 2000) -> StripeClient:
    return StripeClient("sk_test_local", api_base=base_url, timeout_ms=timeout_ms, connect_timeout_ms=500)


def authorize(c: StripeClient) -> Any:
    return c.create_intent(
        "op_auth_1", amount_minor=2000, currency="EUR", reference="pay_1", payment_method="pm_x", confirm=True
    )


def test_create_sends_our_operation_id_as_idempotency_key_manual_capture_and_metadata(
    server: tuple[Script, str],
) -> None:
    """The authorize is one POST /v1/payment_intents with Idempotency-Key = our operation id,
    capture_method=manual, card only, confirm, and metadata carrying our reference and payment id."""
    script, url = server
    script.answers = [(200, intent())]
    result = authorize(client(url))
    assert isinstance(result, Applied) and result.value.reference == "pay_1"
    [(method, path, headers, form)] = script.received
    assert (method, path) == ("POST", "/v1/payment_intents")
    assert headers["Idempotency-Key"] == "op_auth_1"
    assert form["capture_method"] == ["manual"] and form["confirm"] == ["true"]
    assert form["amount"] == ["2000"] and form["currency"] == ["eur"]
    assert form["metadata[reference]"] == ["pay_1"] and form["metadata[payment_id]"] == ["pay_1"]
    assert form["allowed_payment_method_types[0]"] == ["card"]


@pytest.mark.parametrize("status", [500, 502, 503, 409, 429])
def test_retryable_answers_are_one_request_and_no_answer(server: tuple[Script, str], status: int) -> None:
    """A 5xx, 409 (a concurrent request with this key) or 429 is NoAnswer after exactly ONE request:
    the SDK's automatic retries are off, the executor decides what happens next."""
    script, url = server
    script.answers = [(status, {"error": {"type": "api_error", "message": "boom"}})]
    result = authorize(client(url))
    assert isinstance(result, NoAnswer) and str(status) in result.reason
    assert len(script.received) == 1


def test_a_timeout_is_no_answer_after_one_request(server: tuple[Script, str]) -> None:
    """A server that does not answer within the timeout: NoAnswer, one request, no retry."""
    script, url = server
    script.answers, script.hang_s = [(200, intent())], 1.5
    started = time.monotonic()
    result = client(url, timeout_ms=600).capture_intent("op_cap", "pi_1")
    assert isinstance(result, NoAnswer) and result.reason.startswith("connection_error")
    assert len(script.received) == 1 and time.monotonic() - started < 1.4


def test_connection_refused_is_no_answer() -> None:
    """Nothing listening: NoAnswer (it may be our network, never proof of anything)."""
    result = client("http://127.0.0.1:9", timeout_ms=500).cancel_intent("op_x", "pi_1")
    assert isinstance(result, NoAnswer)


def test_card_decline_is_declined_with_the_intent(server: tuple[Script, str]) -> None:
    """A 402 card_error carrying the payment intent (Stripe's documented decline) is Declined."""
    script, url = server
    failed = intent(
        status="requires_payment_method",
        amount_capturable=0,
        last_payment_error={
            "type": "card_error",
            "code": "card_declined",
            "decline_code": "insufficient_funds",
            "message": "Your card has insufficient funds.",
        },
    )
    script.answers = [
        (
            402,
            {
                "error": {
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "insufficient_funds",
                    "message": "Your card has insufficient funds.",
                    "payment_intent": failed,
                }
            },
        )
    ]
    result = authorize(client(url))
    assert isinstance(result, Declined) and result.decline_code == "insufficient_funds"
    assert result.intent.last_payment_error is not None


def test_a_402_without_the_intent_is_no_answer(server: tuple[Script, str]) -> None:
    """A 402 we cannot tie to our intent proves nothing about it."""
    script, url = server
    script.answers = [(402, {"error": {"type": "card_error", "code": "card_declined", "message": "x"}})]
    assert isinstance(authorize(client(url)), NoAnswer)


def test_idempotency_error_is_refused_as_key_reused(server: tuple[Script, str]) -> None:
    """Stripe's 400 idempotency_error (the key was used with other parameters) maps to simpsp's
    ``idempotency_key_reused``: the earlier request stands (payment-state looks it up)."""
    script, url = server
    script.answers = [
        (400, {"error": {"type": "idempotency_error", "message": "Keys for idempotent requests"}})
    ]
    result = authorize(client(url))
    assert isinstance(result, Refused) and result.code == "idempotency_key_reused"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, {"type": "invalid_request_error", "code": "amount_too_large", "message": "too large"}),
        (
            400,
            {"type": "invalid_request_error", "code": "payment_intent_unexpected_state", "message": "state"},
        ),
        (401, {"type": "invalid_request_error", "message": "Invalid API Key provided"}),
        (403, {"type": "invalid_request_error", "code": "secret_key_required", "message": "no"}),
    ],
)
def test_definite_4xx_are_refused(server: tuple[Script, str], status: int, error: dict[str, str]) -> None:
    """A 400/401/403 with Stripe's error object is a definite refusal (not executed)."""
    script, url = server
    script.answers = [(status, {"error": error})]
    result = client(url).capture_intent("op_cap", "pi_1")
    assert isinstance(result, Refused) and result.status == status


def test_2xx_we_cannot_read_is_no_answer(server: tuple[Script, str]) -> None:
    """An answer whose amounts are floats (or any shape we do not know) proves nothing."""
    script, url = server
    script.answers = [(200, intent(amount=20.0))]
    assert isinstance(authorize(client(url)), NoAnswer)


def test_retrieve_404_resource_missing_is_absent_other_404_is_no_answer(server: tuple[Script, str]) -> None:
    """Only Stripe's resource_missing is "no such object"; a 404 without it (a proxy) is NoAnswer."""
    script, url = server
    script.answers = [
        (404, {"error": {"type": "invalid_request_error", "code": "resource_missing", "message": "No such"}}),
        (404, {"nothing": "here"}),
    ]
    c = client(url)
    assert isinstance(c.retrieve_intent("pi_1"), Absent)
    assert isinstance(c.retrieve_intent("pi_1"), NoAnswer)


def test_search_by_reference_found_conflict_and_the_query(server: tuple[Script, str]) -> None:
    """find_intent_by_reference sends the Search API query on metadata['reference'] (quotes
    escaped); one match is Found, two are Conflict (a person decides)."""
    script, url = server
    second = intent(id="pi_other")
    script.answers = [
        (
            200,
            {
                "object": "search_result",
                "data": [intent()],
                "has_more": False,
                "url": "/v1/payment_intents/search",
            },
        ),
        (200, {"object": "search_result", "data": [intent(), second], "has_more": False, "url": "/x"}),
    ]
    c = client(url)
    assert isinstance(c.find_intent_by_reference("pay_1"), Found)
    conflict = c.find_intent_by_reference("pay_1")
    assert isinstance(conflict, Conflict) and len(conflict.values) == 2
    _, path, _, _ = script.received[0]
    assert path.startswith("/v1/payment_intents/search?")
    assert "metadata%5B%27reference%27%5D%3A%27pay_1%27" in path


def test_refunds_are_found_by_listing_the_intents_refunds_page_by_page(server: tuple[Script, str]) -> None:
    """find_refund_by_reference lists GET /v1/refunds?payment_intent=… across pages
    (starting_after) and keeps the refund carrying our reference; without the intent, NoAnswer."""
    script, url = server

    def refund(rid: str, ref: str) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "refund",
            "amount": 500,
            "currency": "eur",
            "status": "succeeded",
            "payment_intent": "pi_1",
            "created": 1,
            "metadata": {"reference": ref},
            "reason": None,
        }

    script.answers = [
        (
            200,
            {"object": "list", "data": [refund("re_a", "op_other")], "has_more": True, "url": "/v1/refunds"},
        ),
        (
            200,
            {"object": "list", "data": [refund("re_b", "op_ref")], "has_more": False, "url": "/v1/refunds"},
        ),
    ]
    c = client(url)
    found = c.find_refund_by_reference("op_ref", intent_id="pi_1")
    assert isinstance(found, Found) and found.value.id == "re_b"
    assert "starting_after=re_a" in script.received[1][1]
    assert isinstance(c.find_refund_by_reference("op_ref"), NoAnswer)
