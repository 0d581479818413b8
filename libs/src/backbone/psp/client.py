"""The PSP client: payment intents, refunds and payouts over the PSP's HTTP JSON API, results as closed sets.

Every write takes OUR operation id and sends it as the ``Idempotency-Key``: repeating a write with the
same operation id (after a timeout, a crash, a redelivery) can never apply it twice while the PSP
keeps the key (24 h by default at simpsp). Nothing is retried here (see ``transport``); every
timeout, connection error, 5xx or unreadable answer is ``NoAnswer`` (``answers`` maps every HTTP
answer; ``results`` says what each result means).

Thread-safe: one client per process, shared by worker threads (a keep-alive pool inside).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

from backbone.invariants import invariant
from backbone.psp import answers
from backbone.psp.model import PaymentIntent, Refund, parse_intent, parse_payout, parse_refund
from backbone.psp.results import (
    IntentLookup,
    IntentWrite,
    NoAnswer,
    PayoutLookup,
    PayoutWrite,
    RefundLookup,
    RefundWrite,
)
from backbone.psp.transport import Answer, Failure, HttpPool, TransportSettings
from backbone.settings import Secret, setting

OPERATION_ID_LENGTH_MAX: Final = 255
EVENTS_PAGE_MAX: Final = 100
PROVIDER: Final = "simpsp"


@dataclass(frozen=True)
class PspClientSettings:
    base_url: str = setting("PSP_BASE_URL", doc="e.g. http://127.0.0.1:17101 (psp_sim)")
    api_key: Secret = setting("PSP_API_KEY", secret=True, doc="bearer key of the PSP API")
    timeout_ms: int = setting("PSP_TIMEOUT_MS", 5000, doc="total bound of one call")
    connect_timeout_ms: int = setting("PSP_CONNECT_TIMEOUT_MS", 2000)
    pool_size_max: int = setting("PSP_POOL_SIZE_MAX", 8, doc="idle keep-alive connections kept")


@dataclass(frozen=True, slots=True)
class EventsPage:
    """One page of ``GET /v1/events``: event objects, newest first, and whether older ones follow
    (ask again with ``starting_after`` = the last event's id)."""

    events: tuple[dict[str, Any], ...]
    has_more: bool


def _check_operation_id(operation_id: str) -> None:
    ok = 0 < len(operation_id) <= OPERATION_ID_LENGTH_MAX and all(33 <= ord(c) <= 126 for c in operation_id)
    invariant(ok, "operation id: 1..255 visible ASCII characters")


def _check_amount(amount_minor: int | None) -> None:
    invariant(amount_minor is None or (type(amount_minor) is int and amount_minor > 0), "amount_minor > 0")


class PspClient:
    """Calls to the PSP; see the module docstring and ``results`` for the result contract."""

    def __init__(
        self,
        base_url: str,
        api_key: Secret | str,
        *,
        timeout_ms: int = 5000,
        connect_timeout_ms: int = 2000,
        pool_size_max: int = 8,
    ) -> None:
        key = api_key.reveal() if isinstance(api_key, Secret) else api_key
        invariant(bool(key), "a PSP API key")
        self._auth = f"Bearer {key}"
        self._http = HttpPool(base_url, TransportSettings(timeout_ms, connect_timeout_ms, pool_size_max))

    @classmethod
    def from_settings(cls, s: PspClientSettings) -> PspClient:
        return cls(
            s.base_url,
            s.api_key,
            timeout_ms=s.timeout_ms,
            connect_timeout_ms=s.connect_timeout_ms,
            pool_size_max=s.pool_size_max,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PspClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "PspClient(api_key='***')"

    @property
    def provider(self) -> str:
        return PROVIDER

    # -- writes ----------------------------------------------------------------------------------------

    def _post(self, operation_id: str, path: str, fields: Mapping[str, Any]) -> Answer | Failure:
        _check_operation_id(operation_id)
        body = json.dumps({k: v for k, v in fields.items() if v is not None}, separators=(",", ":")).encode()
        headers = {
            "Authorization": self._auth,
            "Idempotency-Key": operation_id,
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        return self._http.request("POST", path, body, headers)

    def create_intent(
        self,
        operation_id: str,
        *,
        amount_minor: int,
        currency: str,
        reference: str,
        payment_method: str | None = None,
        metadata: Mapping[str, str] | None = None,
        capture_method: str = "manual",
        confirm: bool = False,
    ) -> IntentWrite:
        """Create a payment intent carrying our ``reference`` (our payment id); ``confirm`` authorizes too."""
        _check_amount(amount_minor)
        fields = {
            "amount_minor": amount_minor,
            "currency": currency,
            "reference": reference,
            "payment_method": payment_method,
            "metadata": dict(metadata) if metadata else None,
            "capture_method": capture_method,
            "confirm": confirm or None,
        }
        return answers.intent_write(self._post(operation_id, "/v1/payment_intents", fields))

    def confirm_intent(
        self, operation_id: str, intent_id: str, *, payment_method: str | None = None
    ) -> IntentWrite:
        """Authorize: ``requires_capture`` (or ``succeeded``), ``requires_action`` (3DS), or Declined."""
        path = f"/v1/payment_intents/{quote(intent_id, safe='')}/confirm"
        return answers.intent_write(self._post(operation_id, path, {"payment_method": payment_method}))

    def capture_intent(
        self, operation_id: str, intent_id: str, *, amount_minor: int | None = None
    ) -> IntentWrite:
        """Capture all (None) or part of the authorization; the rest is released."""
        _check_amount(amount_minor)
        path = f"/v1/payment_intents/{quote(intent_id, safe='')}/capture"
        return answers.intent_write(self._post(operation_id, path, {"amount_to_capture_minor": amount_minor}))

    def cancel_intent(self, operation_id: str, intent_id: str, *, reason: str | None = None) -> IntentWrite:
        path = f"/v1/payment_intents/{quote(intent_id, safe='')}/cancel"
        return answers.intent_write(self._post(operation_id, path, {"cancellation_reason": reason}))

    def complete_action(self, operation_id: str, intent_id: str, *, succeeded: bool) -> IntentWrite:
        """Test helper of simpsp: the customer finishes the 3-D Secure challenge (or fails it)."""
        path = f"/v1/test_helpers/payment_intents/{quote(intent_id, safe='')}/complete_action"
        outcome = "succeeded" if succeeded else "failed"
        return answers.intent_write(self._post(operation_id, path, {"outcome": outcome}))

    def create_refund(
        self,
        operation_id: str,
        intent_id: str,
        *,
        amount_minor: int | None = None,
        reference: str | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> RefundWrite:
        """Refund part (None: all that is left) of a captured intent; ``reference`` = our refund id."""
        _check_amount(amount_minor)
        fields = {
            "payment_intent": intent_id,
            "amount_minor": amount_minor,
            "reference": reference,
            "reason": reason,
            "metadata": dict(metadata) if metadata else None,
        }
        return answers.refund_write(self._post(operation_id, "/v1/refunds", fields))

    def create_payout(
        self,
        operation_id: str,
        *,
        amount_minor: int,
        currency: str,
        destination: str,
        reference: str,
        metadata: Mapping[str, str] | None = None,
    ) -> PayoutWrite:
        """Pay ``amount_minor`` out of our PSP balance to ``destination`` (a payment method token);
        ``reference`` = our withdrawal id. ``Applied`` may be ``pending``: it ends paid or failed later."""
        _check_amount(amount_minor)
        invariant(bool(destination) and bool(reference), "a payout needs a destination and a reference")
        fields = {
            "amount_minor": amount_minor,
            "currency": currency,
            "destination": destination,
            "reference": reference,
            "metadata": dict(metadata) if metadata else None,
        }
        return answers.payout_write(self._post(operation_id, "/v1/payouts", fields))

    # -- reads -----------------------------------------------------------------------------------------

    def _get(self, path: str) -> Answer | Failure:
        return self._http.request(
            "GET", path, None, {"Authorization": self._auth, "Accept": "application/json"}
        )

    def retrieve_intent(self, intent_id: str) -> IntentLookup:
        return answers.lookup_one(self._get(f"/v1/payment_intents/{quote(intent_id, safe='')}"), parse_intent)

    def find_intent_by_reference(self, reference: str) -> IntentLookup:
        """The intent(s) carrying our reference: Found, Absent (a complete empty answer), Conflict."""
        result = self._get("/v1/payment_intents?" + urlencode({"reference": reference}))
        return answers.lookup_list(result, parse_intent, lambda i: i.reference == reference)

    def retrieve_refund(self, refund_id: str) -> RefundLookup:
        return answers.lookup_one(self._get(f"/v1/refunds/{quote(refund_id, safe='')}"), parse_refund)

    def find_refund_by_reference(self, reference: str, *, intent_id: str | None = None) -> RefundLookup:
        """simpsp filters refunds by our reference itself; ``intent_id`` is not needed here."""
        del intent_id
        result = self._get("/v1/refunds?" + urlencode({"reference": reference}))
        return answers.lookup_list(result, parse_refund, lambda r: r.reference == reference)

    def retrieve_payout(self, payout_id: str) -> PayoutLookup:
        return answers.lookup_one(self._get(f"/v1/payouts/{quote(payout_id, safe='')}"), parse_payout)

    def find_payout_by_reference(self, reference: str) -> PayoutLookup:
        """The payout(s) carrying our reference (the withdrawal id): Found, Absent, Conflict, NoAnswer."""
        result = self._get("/v1/payouts?" + urlencode({"reference": reference}))
        return answers.lookup_list(result, parse_payout, lambda p: p.reference == reference)

    def list_events(
        self, *, created_gte: int, created_lte: int, starting_after: str | None = None, limit: int = 100
    ) -> EventsPage | NoAnswer:
        """One page of the PSP's events (``GET /v1/events``, newest first, as Stripe's): what a
        merchant that missed webhooks reads to catch up. Each event is the object the webhook
        carried; an answer that is not a readable list of events with ids is NoAnswer."""
        invariant(0 < limit <= EVENTS_PAGE_MAX, "a page of 1..100 events")
        query: dict[str, int | str] = {"created[gte]": created_gte, "created[lte]": created_lte}
        query["limit"] = limit
        if starting_after is not None:
            query["starting_after"] = starting_after
        result = self._get("/v1/events?" + urlencode(query))
        if isinstance(result, Failure):
            return NoAnswer(result.reason)
        if result.status != 200:
            return NoAnswer(f"http_{result.status}")
        try:
            document = json.loads(result.body)
        except ValueError:
            return NoAnswer("unparseable: not JSON")
        items = document.get("data") if isinstance(document, dict) else None
        more = document.get("has_more") if isinstance(document, dict) else None
        if not isinstance(items, list) or not isinstance(more, bool):
            return NoAnswer("unparseable: expected a list")
        if not all(isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"] for e in items):
            return NoAnswer("unparseable: an event without an id")
        return EventsPage(tuple(items), more)

    def list_refunds(self, intent_id: str) -> tuple[Refund, ...] | NoAnswer:
        """Every refund of an intent (complete list), or NoAnswer."""
        result = self._get("/v1/refunds?" + urlencode({"payment_intent": intent_id}))
        found = answers.parse_list(result, parse_refund)
        if not isinstance(found, NoAnswer) and not all(r.payment_intent_id == intent_id for r in found):
            return NoAnswer("list holds a refund of another intent")
        return found


__all__ = ["EventsPage", "PaymentIntent", "PspClient", "PspClientSettings"]
