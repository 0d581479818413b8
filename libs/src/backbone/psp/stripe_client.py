"""Provider ``stripe``: the ``PspProvider`` contract on Stripe's API, through the official SDK (``stripe``).

Every write sends OUR operation id as Stripe's ``Idempotency-Key``: Stripe keeps a key's first
answer for at least 24 hours and replays it for a repeat with the same parameters (a repeat with
other parameters is refused, ``idempotency_error``). Payment intents are created with manual capture
and ``metadata`` carrying our reference (``reference``: the payment id, the refund's operation id or
the withdrawal id) and our payment id: that is how a lookup finds an object whose id we never learned
(``stripe_objects`` reads it back).

The SDK's own retries are OFF (``max_network_retries=0``). The SDK would retry a timeout, a
connection error, a 409 and some 5xx on its own, with the same idempotency key, so the retry would be
the same request and harmless at Stripe; it is off anyway because (1) payment-state's executor owns
the retry policy of every provider (backoff, lookups first, a case after N attempts, never a resend
once the key may be forgotten), and a hidden retry inside a call would stretch its deadline past
``EXECUTOR_LEASE_MS`` by up to the SDK's backoff and make two operations' lease arithmetic lie; (2)
the SDK sends the same key only because we pass it; with retries on and no key it would invent one
per call, which a refactoring could silently reintroduce. One call is one HTTP request here.

Outcomes are the same closed sets as simpsp's ``PspClient`` (``results``); which answer becomes
which is ``stripe_answers``'s.

Lookups: by Stripe id (``retrieve``), or by our reference: payment intents through the Search API
(``metadata['reference']:'…'``), refunds by listing the payment intent's refunds, payouts by
listing recent payouts; see ADR 0010 for which call backs which lookup and why the Search API's
lag (under a minute) is harmless here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar, cast

import stripe
from stripe.params import (
    PaymentIntentCancelParams,
    PaymentIntentCaptureParams,
    PaymentIntentConfirmParams,
    PaymentIntentCreateParams,
    PayoutCreateParams,
    RefundCreateParams,
)

from backbone.invariants import invariant
from backbone.psp.model import Refund
from backbone.psp.results import (
    Absent,
    Applied,
    Found,
    IntentLookup,
    IntentWrite,
    NoAnswer,
    PayoutLookup,
    PayoutWrite,
    RefundLookup,
    RefundWrite,
    Refused,
)
from backbone.psp.stripe_answers import (
    classify,
    classify_read,
    declined,
    document_of,
    error_code,
    matching,
    message_of,
    parsed,
    refunds_of,
    search_matches,
)
from backbone.psp.stripe_objects import (
    PAYMENT_ID_KEY,
    REFERENCE_KEY,
    parse_stripe_intent,
    parse_stripe_payout,
    parse_stripe_refund,
)
from backbone.psp.stripe_settings import StripeClientSettings
from backbone.settings import Secret

PROVIDER: Final = "stripe"
OPERATION_ID_LENGTH_MAX: Final = 255  # Stripe's limit on an Idempotency-Key
LIST_PAGE_SIZE: Final = 100  # Stripe's maximum page
REFUND_PAGES_MAX: Final = 10  # 1,000 refunds of one payment intent: far beyond any real one
PAYOUT_PAGES_MAX: Final = 5  # the 500 most recent payouts; older ones are a case (ADR 0010)
SEARCH_LIMIT: Final = 10  # more than one match is already a Conflict
T = TypeVar("T")
_CancelReason = Literal["abandoned", "duplicate", "fraudulent", "requested_by_customer"]
_RefundReason = Literal["duplicate", "fraudulent", "requested_by_customer"]


def _check_operation_id(operation_id: str) -> None:
    ok = 0 < len(operation_id) <= OPERATION_ID_LENGTH_MAX and all(33 <= ord(c) <= 126 for c in operation_id)
    invariant(ok, "operation id: 1..255 visible ASCII characters")


def _check_amount(amount_minor: int | None) -> None:
    invariant(amount_minor is None or (type(amount_minor) is int and amount_minor > 0), "amount_minor > 0")


def _search_literal(value: str) -> str:
    """A Search API string literal: quotes and backslashes escaped."""
    invariant(0 < len(value) <= 255 and value.isprintable(), "a printable reference of 1..255 characters")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _metadata(reference: str, extra: Mapping[str, str] | None, payment_id: str | None) -> dict[str, str]:
    fields = dict(extra or {})
    fields[REFERENCE_KEY] = reference
    if payment_id is not None:
        fields[PAYMENT_ID_KEY] = payment_id
    return fields


__all__ = ["StripeClient", "StripeClientSettings"]


class StripeClient:
    """Calls to Stripe; thread-safe (the SDK's requests client keeps one session per thread)."""

    def __init__(
        self,
        api_key: Secret | str,
        *,
        api_base: str = "https://api.stripe.com",
        timeout_ms: int = 10_000,
        connect_timeout_ms: int = 2_000,
    ) -> None:
        key = api_key.reveal() if isinstance(api_key, Secret) else api_key
        invariant(bool(key), "a Stripe API key")
        invariant(0 < connect_timeout_ms <= timeout_ms <= 600_000, "0 < connect <= timeout <= 600 s")
        http = stripe.RequestsClient(timeout=(connect_timeout_ms / 1000, timeout_ms / 1000))
        self._stripe = stripe.StripeClient(
            key,
            base_addresses={"api": api_base},
            max_network_retries=0,  # one call, one request: see the module docstring
            http_client=http,
        )
        self._http = http

    @classmethod
    def from_settings(cls, s: StripeClientSettings) -> StripeClient:
        return cls(
            s.key(), api_base=s.api_base, timeout_ms=s.timeout_ms, connect_timeout_ms=s.connect_timeout_ms
        )

    @property
    def provider(self) -> str:
        return PROVIDER

    def close(self) -> None:
        self._http.close()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated

    def __repr__(self) -> str:
        return "StripeClient(api_key='***')"

    # -- writes ----------------------------------------------------------------------------------------

    def _intent_write(self, operation_id: str, send: Callable[[stripe.RequestOptions], Any]) -> IntentWrite:
        _check_operation_id(operation_id)
        try:
            obj = send({"idempotency_key": operation_id})
        except stripe.CardError as exc:
            return declined(exc)
        except stripe.StripeError as exc:
            return classify(exc)
        intent = parsed(obj, parse_stripe_intent)
        return intent if isinstance(intent, NoAnswer) else Applied(intent)

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
        """``POST /v1/payment_intents``: card only (no redirect-based methods, so no return URL)."""
        _check_amount(amount_minor)
        invariant(capture_method in ("manual", "automatic"), "capture_method manual or automatic")
        params: PaymentIntentCreateParams = {
            "amount": amount_minor,
            "currency": currency.lower(),
            "capture_method": cast(Literal["manual", "automatic"], capture_method),
            "allowed_payment_method_types": ["card"],
            "metadata": _metadata(reference, metadata, reference),
        }
        if payment_method is not None:
            params["payment_method"] = payment_method
        if confirm:
            params["confirm"] = True
        return self._intent_write(
            operation_id, lambda options: self._stripe.v1.payment_intents.create(params, options)
        )

    def confirm_intent(
        self, operation_id: str, intent_id: str, *, payment_method: str | None = None
    ) -> IntentWrite:
        params: PaymentIntentConfirmParams = {}
        if payment_method is not None:
            params["payment_method"] = payment_method
        return self._intent_write(
            operation_id, lambda options: self._stripe.v1.payment_intents.confirm(intent_id, params, options)
        )

    def capture_intent(
        self, operation_id: str, intent_id: str, *, amount_minor: int | None = None
    ) -> IntentWrite:
        _check_amount(amount_minor)
        params: PaymentIntentCaptureParams = {}
        if amount_minor is not None:
            params["amount_to_capture"] = amount_minor
        return self._intent_write(
            operation_id, lambda options: self._stripe.v1.payment_intents.capture(intent_id, params, options)
        )

    def cancel_intent(self, operation_id: str, intent_id: str, *, reason: str | None = None) -> IntentWrite:
        params: PaymentIntentCancelParams = {}
        if reason is not None:
            params["cancellation_reason"] = cast(_CancelReason, reason)
        return self._intent_write(
            operation_id, lambda options: self._stripe.v1.payment_intents.cancel(intent_id, params, options)
        )

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
        """``POST /v1/refunds`` of a payment intent; ``reference`` (our refund id) in metadata."""
        _check_amount(amount_minor)
        _check_operation_id(operation_id)
        params: RefundCreateParams = {
            "payment_intent": intent_id,
            "metadata": _metadata(reference or operation_id, metadata, None),
        }
        if amount_minor is not None:
            params["amount"] = amount_minor
        if reason is not None:
            params["reason"] = cast(_RefundReason, reason)
        try:
            obj = self._stripe.v1.refunds.create(params, {"idempotency_key": operation_id})
        except stripe.CardError:
            return NoAnswer("http_402_on_refund")  # as simpsp: a 402 says nothing about a refund
        except stripe.StripeError as exc:
            return classify(exc)
        refund = parsed(obj, parse_stripe_refund)
        return refund if isinstance(refund, NoAnswer) else Applied(refund)

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
        """``POST /v1/payouts`` to ``destination`` (a bank account or card of OUR Stripe account: see
        ADR 0010 on what a Stripe payout is); a 402 is Stripe refusing it (nothing created)."""
        _check_amount(amount_minor)
        _check_operation_id(operation_id)
        invariant(bool(destination) and bool(reference), "a payout needs a destination and a reference")
        params: PayoutCreateParams = {
            "amount": amount_minor,
            "currency": currency.lower(),
            "destination": destination,
            "metadata": _metadata(reference, metadata, None),
        }
        try:
            obj = self._stripe.v1.payouts.create(params, {"idempotency_key": operation_id})
        except stripe.CardError as exc:
            return Refused(402, error_code(exc) or "card_declined", message_of(exc))
        except stripe.StripeError as exc:
            return classify(exc)
        payout = parsed(obj, parse_stripe_payout)
        return payout if isinstance(payout, NoAnswer) else Applied(payout)

    # -- reads -----------------------------------------------------------------------------------------

    def _retrieve(self, fetch: Callable[[], Any], parse: Callable[[Any], T]) -> Found[T] | Absent | NoAnswer:
        try:
            obj = fetch()
        except stripe.InvalidRequestError as exc:
            # Only Stripe's "no such object" is an answer; any other refusal proves nothing.
            return (
                Absent()
                if exc.http_status == 404 and error_code(exc) == "resource_missing"
                else classify_read(exc)
            )
        except stripe.StripeError as exc:
            return classify_read(exc)
        value = parsed(obj, parse)
        return value if isinstance(value, NoAnswer) else Found(value)

    def _pages(
        self, fetch: Callable[[Any], Any], params: dict[str, Any], pages_max: int
    ) -> list[Any] | NoAnswer:
        """Every item of a list, page by page (``starting_after``), or NoAnswer if it did not end
        within ``pages_max`` pages: an incomplete list proves nothing."""
        items: list[Any] = []
        for _ in range(pages_max):
            try:
                document = document_of(fetch(params))
            except stripe.StripeError as exc:
                return classify_read(exc)
            except ValueError:
                return NoAnswer("unparseable: list")
            data = document.get("data") if isinstance(document, dict) else None
            if not isinstance(data, list) or not isinstance(document.get("has_more"), bool):
                return NoAnswer("unparseable: expected a list")
            items.extend(data)
            if not document["has_more"]:
                return items
            last = data[-1].get("id") if data and isinstance(data[-1], dict) else None
            if not isinstance(last, str):
                return NoAnswer("unparseable: list page without ids")
            params = {**params, "starting_after": last}
        return NoAnswer(f"list longer than {pages_max} pages")

    def retrieve_intent(self, intent_id: str) -> IntentLookup:
        return self._retrieve(
            lambda: self._stripe.v1.payment_intents.retrieve(intent_id), parse_stripe_intent
        )

    def find_intent_by_reference(self, reference: str) -> IntentLookup:
        """``GET /v1/payment_intents/search?query=metadata['reference']:'…'`` (see ADR 0010)."""
        query = f"metadata[{_search_literal(REFERENCE_KEY)}]:{_search_literal(reference)}"
        try:
            document = document_of(
                self._stripe.v1.payment_intents.search({"query": query, "limit": SEARCH_LIMIT})
            )
        except stripe.StripeError as exc:
            return classify_read(exc)
        except ValueError:
            return NoAnswer("unparseable: search")
        return search_matches(document, reference)

    def retrieve_refund(self, refund_id: str) -> RefundLookup:
        return self._retrieve(lambda: self._stripe.v1.refunds.retrieve(refund_id), parse_stripe_refund)

    def find_refund_by_reference(self, reference: str, *, intent_id: str | None = None) -> RefundLookup:
        """``GET /v1/refunds?payment_intent=…`` (every page), filtered by our reference: Stripe
        cannot search refunds by metadata, so without the payment intent there is no answer."""
        if intent_id is None:
            return NoAnswer("stripe finds refunds by payment intent only")
        found = self._pages(
            self._stripe.v1.refunds.list,
            {"payment_intent": intent_id, "limit": LIST_PAGE_SIZE},
            REFUND_PAGES_MAX,
        )
        if isinstance(found, NoAnswer):
            return found
        return matching(found, parse_stripe_refund, reference)

    def retrieve_payout(self, payout_id: str) -> PayoutLookup:
        return self._retrieve(lambda: self._stripe.v1.payouts.retrieve(payout_id), parse_stripe_payout)

    def find_payout_by_reference(self, reference: str) -> PayoutLookup:
        """``GET /v1/payouts`` (newest first, at most ``PAYOUT_PAGES_MAX`` pages), filtered by our
        reference: Stripe cannot search payouts by metadata (ADR 0010)."""
        found = self._pages(self._stripe.v1.payouts.list, {"limit": LIST_PAGE_SIZE}, PAYOUT_PAGES_MAX)
        if isinstance(found, NoAnswer):
            return found
        return matching(found, parse_stripe_payout, reference)

    def list_refunds(self, intent_id: str) -> tuple[Refund, ...] | NoAnswer:
        found = self._pages(
            self._stripe.v1.refunds.list,
            {"payment_intent": intent_id, "limit": LIST_PAGE_SIZE},
            REFUND_PAGES_MAX,
        )
        return found if isinstance(found, NoAnswer) else refunds_of(found, intent_id)

    # -- settlement (the reconciler's input; ADR 0010, "Settlement from Stripe") ----------------------

    def list_payouts(self, created_gte_s: int, created_lt_s: int, *, pages_max: int) -> list[Any] | NoAnswer:
        """``GET /v1/payouts?created[gte]=…&created[lt]=…``, every page, as the JSON Stripe sent
        (newest first); NoAnswer when any page fails or the list does not end within ``pages_max``."""
        invariant(0 <= created_gte_s < created_lt_s and pages_max > 0, "a window and a page bound")
        params = {"created": {"gte": created_gte_s, "lt": created_lt_s}, "limit": LIST_PAGE_SIZE}
        return self._pages(self._stripe.v1.payouts.list, params, pages_max)

    def list_balance_transactions(self, payout_id: str, *, pages_max: int) -> list[Any] | NoAnswer:
        """``GET /v1/balance_transactions?payout=po_…&expand[]=data.source``, every page: what
        Stripe paid out in an automatic payout, each with its source object (charge, refund,
        dispute, the payout) expanded; NoAnswer when any page fails or it does not end in time."""
        invariant(payout_id.startswith("po_") and pages_max > 0, "a payout id and a page bound")
        params = {"payout": payout_id, "expand": ["data.source"], "limit": LIST_PAGE_SIZE}
        return self._pages(self._stripe.v1.balance_transactions.list, params, pages_max)
