"""Closed result sets of PSP calls: match them exhaustively (``match`` + ``assert_never``).

Writes (create, confirm, capture, cancel, complete_action -> ``IntentWrite``; refund -> ``RefundWrite``;
create_payout -> ``PayoutWrite``):
- ``Applied(value)``: the PSP executed the call (or replayed its earlier execution for the same
  idempotency key); ``value`` is the intent/refund after it. Its status says what it means
  (``requires_action`` is not a failure; a refund may be ``pending``).
- ``Declined(...)``: HTTP 402 card error: authoritative proof that this authorization attempt failed
  (card declined, 3-D Secure failed). The intent went back to ``requires_payment_method``.
- ``Refused(status, code, message)``: a definite 4xx answer (for a payout also a 402 ``card_declined``:
  the PSP refused to create it; nothing was created): the PSP did not execute this request
  (validation, wrong state, amount too large, unknown object, bad API key, body too large), or the
  operation id was already used for a different request (``idempotency_key_reused``: a bug in the
  caller; the earlier request's effect stands).
- ``NoAnswer(reason)``: anything else: timeout, connection error, 5xx, 408, 429, 409 other than
  ``idempotency_key_reused``, a 3xx, or an answer we cannot parse. The call may or may not have been
  applied: resolve by a status query, a webhook, or by repeating it with the same operation id while the
  PSP still keeps the key. Never treat it as a failure.

A payout that is ``Applied`` may still be ``pending``; it ends ``paid`` or ``failed`` (webhook or lookup).

Lookups (``IntentLookup``, ``RefundLookup``, ``PayoutLookup``): ``Found(value)``, ``Absent()`` (a
complete answer: HTTP 404 ``resource_missing``, or an empty list by reference), ``Conflict(values)``
(more than one object carries the reference: e.g. a create repeated after the PSP's idempotency key
expired), ``NoAnswer``.
"No answer" is never "not found".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from backbone.psp.model import PaymentIntent, Payout, Refund

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Applied(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class Declined:
    code: str
    decline_code: str | None
    message: str
    intent: PaymentIntent


@dataclass(frozen=True, slots=True)
class Refused:
    status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class NoAnswer:
    reason: str


@dataclass(frozen=True, slots=True)
class Found(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class Absent:
    pass


@dataclass(frozen=True, slots=True)
class Conflict(Generic[T]):
    values: tuple[T, ...]


IntentWrite = Applied[PaymentIntent] | Declined | Refused | NoAnswer
RefundWrite = Applied[Refund] | Refused | NoAnswer
IntentLookup = Found[PaymentIntent] | Absent | Conflict[PaymentIntent] | NoAnswer
RefundLookup = Found[Refund] | Absent | Conflict[Refund] | NoAnswer
PayoutWrite = Applied[Payout] | Refused | NoAnswer
PayoutLookup = Found[Payout] | Absent | Conflict[Payout] | NoAnswer
