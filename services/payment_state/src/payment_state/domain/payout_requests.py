"""The ``CreatePayout`` command as a typed request, its digest, and the payout it creates.

Pure. The idempotency key of a payout is the withdrawal id: one payout per withdrawal. The digest
binds the key to the normalized request, so the same withdrawal id with any other field changed is
a conflict (refused, recorded), never a second payout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from backbone.invariants import invariant

from payment_state.domain.payouts import Payout, PayoutOperation, PayoutState, check_payout


@dataclass(frozen=True, slots=True)
class CreatePayoutRequest:
    withdrawal_id: str
    provider: str
    amount_minor: int
    currency: str
    destination_token: str
    source_payment_id: str
    mt5_login: int
    mt5_debit_id: int


def payout_digest(merchant_id: str, request: CreatePayoutRequest) -> str:
    """SHA-256 of the merchant and the normalized request (canonical JSON)."""
    fields = {"kind": "payout", "merchant_id": merchant_id, **asdict(request)}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def decide_payout(
    request: CreatePayoutRequest, *, merchant_id: str, operation_id: str, now_ms: int
) -> PayoutState:
    """The new payout (PENDING) and its operation (PENDING, never called)."""
    invariant(bool(operation_id) and now_ms > 0, "an operation id and a time")
    payout = Payout(
        withdrawal_id=request.withdrawal_id,
        merchant_id=merchant_id,
        provider=request.provider,
        amount_minor=request.amount_minor,
        currency=request.currency,
        destination_token=request.destination_token,
        source_payment_id=request.source_payment_id,
        mt5_login=request.mt5_login,
        mt5_debit_id=request.mt5_debit_id,
        request_digest=payout_digest(merchant_id, request),
    )
    operation = PayoutOperation(operation_id, request.withdrawal_id, created_at_ms=now_ms)
    return check_payout(PayoutState(payout, operation))
