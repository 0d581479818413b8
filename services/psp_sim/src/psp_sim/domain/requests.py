"""Request bodies of the PSP API, parsed into typed commands or a closed ``Invalid`` answer.

Strict on purpose (a simulator that accepts sloppy input teaches clients bad habits): unknown
parameters are refused (``parameter_unknown``), amounts are ``int`` (not bool, not float, not
text) in ``1..AMOUNT_MINOR_MAX``, currencies are known ISO-4217 codes, metadata is a small flat
map of strings. Every failure names the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

from backbone.money import MoneyError, currency_exponent

from psp_sim.domain.intents import ActionOutcome, CaptureMethod

AMOUNT_MINOR_MAX: Final = 99_999_999_999  # 1e11 - 1: ~a billion in a 2-decimal currency
REFERENCE_LENGTH_MAX: Final = 255
METADATA_KEYS_MAX: Final = 50
METADATA_KEY_LENGTH_MAX: Final = 40
METADATA_VALUE_LENGTH_MAX: Final = 500
CANCEL_REASONS: Final = frozenset({"duplicate", "fraudulent", "requested_by_customer", "abandoned"})
REFUND_REASONS: Final = frozenset({"duplicate", "fraudulent", "requested_by_customer"})


@dataclass(frozen=True, slots=True)
class Invalid:
    code: str
    message: str
    param: str | None = None


@dataclass(frozen=True, slots=True)
class CreateIntent:
    amount_minor: int
    currency: str
    payment_method: str | None
    reference: str | None
    metadata: dict[str, str]
    capture_method: CaptureMethod
    confirm: bool


@dataclass(frozen=True, slots=True)
class ConfirmIntent:
    payment_method: str | None


@dataclass(frozen=True, slots=True)
class CaptureIntent:
    amount_minor: int | None


@dataclass(frozen=True, slots=True)
class CancelIntent:
    reason: str | None


@dataclass(frozen=True, slots=True)
class CreateRefund:
    payment_intent_id: str
    amount_minor: int | None
    reference: str | None
    reason: str | None
    metadata: dict[str, str]


@dataclass(frozen=True, slots=True)
class CreatePayout:
    amount_minor: int
    currency: str
    destination: str
    reference: str
    metadata: dict[str, str]


@dataclass(frozen=True, slots=True)
class CompleteAction:
    outcome: ActionOutcome


class _Bad(Exception):
    def __init__(self, invalid: Invalid) -> None:
        self.invalid = invalid


def _unknown_params(body: dict[str, Any], allowed: frozenset[str]) -> None:
    for key in body:
        if key not in allowed:
            raise _Bad(Invalid("parameter_unknown", f"Received unknown parameter: {key}", key))


def _amount(body: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = body.get(name)
    if value is None:
        if required:
            raise _Bad(Invalid("parameter_missing", f"Missing required param: {name}.", name))
        return None
    if type(value) is not int or not 0 < value <= AMOUNT_MINOR_MAX:
        raise _Bad(
            Invalid("parameter_invalid_integer", f"{name} must be an integer 1..{AMOUNT_MINOR_MAX}.", name)
        )
    return value


def _required_amount(body: dict[str, Any], name: str) -> int:
    value = _amount(body, name, required=True)
    if value is None:  # _amount raised already; this satisfies the type checker without assert
        raise _Bad(Invalid("parameter_missing", f"Missing required param: {name}.", name))
    return value


def _text(body: dict[str, Any], name: str, length_max: int = REFERENCE_LENGTH_MAX) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= length_max or not value.isprintable():
        raise _Bad(
            Invalid("parameter_invalid_string", f"{name} must be 1..{length_max} printable chars.", name)
        )
    return value


def _choice(body: dict[str, Any], name: str, choices: frozenset[str]) -> str | None:
    value = _text(body, name)
    if value is not None and value not in choices:
        raise _Bad(Invalid("parameter_invalid", f"{name} must be one of {sorted(choices)}.", name))
    return value


def _metadata(body: dict[str, Any]) -> dict[str, str]:
    value = body.get("metadata")
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > METADATA_KEYS_MAX:
        raise _Bad(
            Invalid(
                "parameter_invalid", f"metadata: an object of at most {METADATA_KEYS_MAX} keys.", "metadata"
            )
        )
    for key, item in value.items():
        if not 0 < len(key) <= METADATA_KEY_LENGTH_MAX or not isinstance(item, str):
            raise _Bad(Invalid("parameter_invalid", "metadata keys 1..40 chars, values strings.", "metadata"))
        if len(item) > METADATA_VALUE_LENGTH_MAX:
            raise _Bad(Invalid("parameter_invalid", "metadata values at most 500 chars.", "metadata"))
    return cast(dict[str, str], value)


def _currency(body: dict[str, Any]) -> str:
    value = body.get("currency")
    if not isinstance(value, str):
        raise _Bad(Invalid("parameter_missing", "Missing required param: currency.", "currency"))
    try:
        currency_exponent(value)
    except MoneyError:
        raise _Bad(Invalid("parameter_invalid", f"Unsupported currency: {value!r}.", "currency")) from None
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise _Bad(Invalid("parameter_invalid", f"{name} must be true or false.", name))
    return value


_CREATE: Final = frozenset(
    {"amount_minor", "currency", "payment_method", "reference", "metadata", "capture_method", "confirm"}
)


def parse_create(body: dict[str, Any]) -> CreateIntent | Invalid:
    try:
        _unknown_params(body, _CREATE)
        capture_method = _choice(body, "capture_method", frozenset({"manual", "automatic"})) or "manual"
        return CreateIntent(
            amount_minor=_required_amount(body, "amount_minor"),
            currency=_currency(body),
            payment_method=_text(body, "payment_method"),
            reference=_text(body, "reference"),
            metadata=_metadata(body),
            capture_method=cast(CaptureMethod, capture_method),
            confirm=_bool(body, "confirm"),
        )
    except _Bad as bad:
        return bad.invalid


def parse_confirm(body: dict[str, Any]) -> ConfirmIntent | Invalid:
    try:
        _unknown_params(body, frozenset({"payment_method"}))
        return ConfirmIntent(_text(body, "payment_method"))
    except _Bad as bad:
        return bad.invalid


def parse_capture(body: dict[str, Any]) -> CaptureIntent | Invalid:
    try:
        _unknown_params(body, frozenset({"amount_to_capture_minor"}))
        return CaptureIntent(_amount(body, "amount_to_capture_minor", required=False))
    except _Bad as bad:
        return bad.invalid


def parse_cancel(body: dict[str, Any]) -> CancelIntent | Invalid:
    try:
        _unknown_params(body, frozenset({"cancellation_reason"}))
        return CancelIntent(_choice(body, "cancellation_reason", CANCEL_REASONS))
    except _Bad as bad:
        return bad.invalid


def parse_refund(body: dict[str, Any]) -> CreateRefund | Invalid:
    try:
        _unknown_params(
            body, frozenset({"payment_intent", "amount_minor", "reference", "reason", "metadata"})
        )
        intent_id = _text(body, "payment_intent")
        if intent_id is None:
            raise _Bad(
                Invalid("parameter_missing", "Missing required param: payment_intent.", "payment_intent")
            )
        return CreateRefund(
            payment_intent_id=intent_id,
            amount_minor=_amount(body, "amount_minor", required=False),
            reference=_text(body, "reference"),
            reason=_choice(body, "reason", REFUND_REASONS),
            metadata=_metadata(body),
        )
    except _Bad as bad:
        return bad.invalid


def parse_complete_action(body: dict[str, Any]) -> CompleteAction | Invalid:
    try:
        _unknown_params(body, frozenset({"outcome"}))
        outcome = _choice(body, "outcome", frozenset({"succeeded", "failed"}))
        if outcome is None:
            raise _Bad(Invalid("parameter_missing", "Missing required param: outcome.", "outcome"))
        return CompleteAction(cast(ActionOutcome, outcome))
    except _Bad as bad:
        return bad.invalid


_PAYOUT: Final = frozenset({"amount_minor", "currency", "destination", "reference", "metadata"})


def _required_text(body: dict[str, Any], name: str) -> str:
    value = _text(body, name)
    if value is None:
        raise _Bad(Invalid("parameter_missing", f"Missing required param: {name}.", name))
    return value


def parse_payout(body: dict[str, Any]) -> CreatePayout | Invalid:
    """A payout: amount, currency, a payment method token as destination, our reference (required).
    A card number never gets here (the raw body is refused first); an unknown token is refused by the
    domain, like an unknown payment method on confirm."""
    try:
        _unknown_params(body, _PAYOUT)
        return CreatePayout(
            amount_minor=_required_amount(body, "amount_minor"),
            currency=_currency(body),
            destination=_required_text(body, "destination"),
            reference=_required_text(body, "reference"),
            metadata=_metadata(body),
        )
    except _Bad as bad:
        return bad.invalid
