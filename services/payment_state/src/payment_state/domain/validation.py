"""Turning an untrusted request body (HTTP JSON or a command's fields) into a typed request.

Pure. Card data never gets this far: the HTTP middleware (``backbone.http``) and the consumer's
contract check (``backbone.consumer.messages``) refuse it before any handler runs. Checks here, in
this order:
1. an MT5 login supplied by the caller (the login comes from mt5-credit's deposit intent, never
   from the browser): ``mt5_login_not_accepted``;
2. the request's own fields: unknown fields, types, ranges; each with its own code.
Error messages name the field, never its value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from backbone.carddata import find_card_number
from backbone.money import (
    DEFAULT_LIMIT,
    AmountLimit,
    AmountRefused,
    MoneyError,
    currency_exponent,
    request_amount,
)

from payment_state.domain.commands import (
    CancelRequest,
    CaptureRequest,
    CreatePaymentRequest,
    RefundRequest,
    Rejection,
)
from payment_state.domain.model import CaptureMethod
from payment_state.domain.payout_requests import CreatePayoutRequest

_SAFE_ID: Final = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_TOKEN: Final = re.compile(r"^[A-Za-z0-9_\-]{1,255}$")
_IDEMPOTENCY_KEY: Final = re.compile(r"^[\x21-\x7e]{1,255}$")
REASON_CHARS_MAX: Final = 500

T = TypeVar("T")


def _normalized_name(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def _mentions_mt5_login(body: Mapping[str, Any]) -> bool:
    return any("mt5" in _normalized_name(str(k)) or _normalized_name(str(k)) == "login" for k in body)


class _Invalid(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.rejection = Rejection(400, code, message)


def _screen(body: object, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise _Invalid("invalid_body", "the body must be a JSON object")
    if _mentions_mt5_login(body):
        raise _Invalid(
            "mt5_login_not_accepted", "the MT5 account comes from the deposit intent, never the request"
        )
    unknown = sorted(str(k) for k in body if k not in allowed)
    if unknown:
        raise _Invalid("unknown_field", f"unknown field(s): {', '.join(unknown)[:200]}")
    return body


def _amount(body: Mapping[str, Any], limit: AmountLimit) -> int:
    amount = request_amount(body.get("amount_minor"), body.get("currency"), limit)
    match amount:
        case int():
            return amount
        case AmountRefused(code="amount_too_large", message=message):
            raise _Invalid("amount_too_large", message)
        case AmountRefused(message=message):
            raise _Invalid("invalid_amount", message)


def _currency(body: Mapping[str, Any]) -> str:
    value = body.get("currency")
    if not isinstance(value, str) or value != value.upper():
        raise _Invalid("invalid_currency", "currency must be an upper-case ISO 4217 code")
    try:
        currency_exponent(value)
    except MoneyError:
        raise _Invalid("invalid_currency", "currency is not a supported ISO 4217 code") from None
    return value


def _optional_text(body: Mapping[str, Any], name: str, pattern: re.Pattern[str] | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= REASON_CHARS_MAX:
        raise _Invalid(f"invalid_{name}", f"{name} must be a non-empty string")
    if pattern is not None and not pattern.fullmatch(value):
        raise _Invalid(f"invalid_{name}", f"{name} has characters that are not allowed")
    return value


def _guarded(parse: Callable[[], T]) -> T | Rejection:
    try:
        return parse()
    except _Invalid as invalid:
        return invalid.rejection


_CREATE_FIELDS: Final = frozenset(
    {"amount_minor", "currency", "payment_method_token", "capture_method", "deposit_reference"}
)


def parse_create(body: object, *, limit: AmountLimit = DEFAULT_LIMIT) -> CreatePaymentRequest | Rejection:
    def parse() -> CreatePaymentRequest:
        fields = _screen(body, _CREATE_FIELDS)
        token = fields.get("payment_method_token")
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise _Invalid("invalid_payment_method_token", "payment_method_token must be a provider token")
        method = fields.get("capture_method", "manual")
        if method not in ("manual", "automatic"):
            raise _Invalid("invalid_capture_method", "capture_method must be 'manual' or 'automatic'")
        return CreatePaymentRequest(
            amount_minor=_amount(fields, limit),
            currency=_currency(fields),
            payment_method_token=token,
            capture_method=CaptureMethod(method),
            deposit_reference=_optional_text(fields, "deposit_reference", _SAFE_ID),
        )

    return _guarded(parse)


def parse_capture(
    payment_id: str, body: object, *, limit: AmountLimit = DEFAULT_LIMIT
) -> CaptureRequest | Rejection:
    def parse() -> CaptureRequest:
        fields = _screen(body, frozenset({"amount_minor", "currency"}))
        if fields.get("amount_minor") is None and fields.get("currency") is None:
            return CaptureRequest(payment_id)
        return CaptureRequest(payment_id, _amount(fields, limit), _currency(fields))

    return _guarded(parse)


def parse_cancel(payment_id: str, body: object) -> CancelRequest | Rejection:
    def parse() -> CancelRequest:
        fields = _screen(body, frozenset({"reason"}))
        return CancelRequest(payment_id, _optional_text(fields, "reason"))

    return _guarded(parse)


def parse_refund(
    payment_id: str, body: object, *, limit: AmountLimit = DEFAULT_LIMIT
) -> RefundRequest | Rejection:
    def parse() -> RefundRequest:
        fields = _screen(body, frozenset({"amount_minor", "currency", "reason"}))
        return RefundRequest(
            payment_id, _amount(fields, limit), _currency(fields), _optional_text(fields, "reason")
        )

    return _guarded(parse)


def valid_payment_id(payment_id: str) -> bool:
    return _SAFE_ID.fullmatch(payment_id) is not None


def valid_provider_payment_id(reference: str) -> bool:
    """A PSP's payment id as the store keeps it (``pi_…``): a search for anything else reads nothing."""
    return _TOKEN.fullmatch(reference) is not None


def check_idempotency_key(key: str | None) -> Rejection | None:
    if key is None or key == "":
        return Rejection(400, "idempotency_key_missing", "send an Idempotency-Key header")
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        return Rejection(400, "invalid_idempotency_key", "Idempotency-Key: 1-255 printable ASCII characters")
    return None


_WITHDRAWAL_ID: Final = re.compile(r"^wd_[0-9a-f]{32}$")
_PROVIDER: Final = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_PAYOUT_FIELDS: Final = frozenset(
    {"withdrawal_id", "provider", "amount_minor", "currency", "destination_token", "source_payment_id",
     "mt5_login", "mt5_debit_id"}
)  # fmt: skip  # packed: a few items a line read better than one each


def _positive_id(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _Invalid(f"invalid_{name}", f"{name} must be a positive integer")
    return value


def _destination(body: Mapping[str, Any]) -> str:
    value = body.get("destination_token")
    # A card number is never a token: refused by name, before the shape check says anything else.
    if isinstance(value, str) and find_card_number(value):
        raise _Invalid(
            "card_data_forbidden", "destination_token must be a payment method token, not a card number"
        )
    if not isinstance(value, str) or not _TOKEN.fullmatch(value) or value.isdigit():
        raise _Invalid("invalid_destination_token", "destination_token must be a payment method token")
    return value


def parse_create_payout(
    withdrawal_id: str, body: object, *, limit: AmountLimit = DEFAULT_LIMIT
) -> CreatePayoutRequest | Rejection:
    """A ``CreatePayout`` command's fields (without envelope, merchant and key), keyed by
    ``withdrawal_id`` (the Kafka key, which must be the body's withdrawal id)."""

    def parse() -> CreatePayoutRequest:
        # mt5-credit names the login it debited (not a browser choosing an account): no _screen.
        if not isinstance(body, Mapping):
            raise _Invalid("invalid_body", "the body must be a record")
        unknown = sorted(str(k) for k in body if k not in _PAYOUT_FIELDS)
        if unknown:
            raise _Invalid("unknown_field", f"unknown field(s): {', '.join(unknown)[:200]}")
        fields: Mapping[str, Any] = body
        if not _WITHDRAWAL_ID.fullmatch(withdrawal_id) or fields.get("withdrawal_id") != withdrawal_id:
            raise _Invalid(
                "invalid_withdrawal_id", "withdrawal_id must be 'wd_' + 32 hex and the message key"
            )
        provider = fields.get("provider")
        if not isinstance(provider, str) or not _PROVIDER.fullmatch(provider):
            raise _Invalid("invalid_provider", "provider must be a lower-case provider name")
        source = fields.get("source_payment_id")
        if not isinstance(source, str) or not _SAFE_ID.fullmatch(source):
            raise _Invalid("invalid_source_payment_id", "source_payment_id must be 1-64 of [A-Za-z0-9_-]")
        return CreatePayoutRequest(
            withdrawal_id=withdrawal_id,
            provider=provider,
            amount_minor=_amount(fields, limit),
            currency=_currency(fields),
            destination_token=_destination(fields),
            source_payment_id=source,
            mt5_login=_positive_id(fields, "mt5_login"),
            mt5_debit_id=_positive_id(fields, "mt5_debit_id"),
        )

    return _guarded(parse)
