"""Deposit intents: created by the broker's server for a logged-in customer and one of their logins.

mt5-credit owns the customer <-> login mapping and refuses a login that is not the customer's (the
same answer for an unknown login, so the API does not reveal whose logins exist). Idempotency is
data: same key + same request digest replays the stored intent; a different request is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from backbone.ids import new_id

from mt5_credit.application.ports import CreditStore, RateSource
from mt5_credit.domain.intake import DepositIntent


@dataclass(frozen=True)
class IntentRequest:
    merchant_id: str
    customer_id: str
    mt5_login: int
    amount_minor: int
    currency: str

    def digest(self) -> str:
        canonical = json.dumps(
            [self.customer_id, self.mt5_login, self.amount_minor, self.currency], separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Created:
    intent: DepositIntent
    replayed: bool


@dataclass(frozen=True)
class IntentRefused:
    code: str  # machine-readable: login_not_owned | account_disabled | no_fx_rate | idempotency_key_reused
    message: str


IntentResult = Created | IntentRefused


def create_intent(
    store: CreditStore, request: IntentRequest, idempotency_key: str, rates: RateSource
) -> IntentResult:
    """In one transaction: check the mapping, then insert or replay under the idempotency key."""
    with store.transaction():
        account = store.load_account(request.mt5_login)
        if account is None or account.customer_id != request.customer_id:
            return IntentRefused("login_not_owned", "this MT5 login is not one of the customer's accounts")
        if not account.enabled:
            return IntentRefused("account_disabled", "this MT5 account is disabled")
        if account.currency != request.currency and (
            rates.quote(request.currency, account.currency, time.time_ns() // 1_000_000) is None
        ):
            return IntentRefused("no_fx_rate", f"no FX rate {request.currency}->{account.currency}")
        intent = DepositIntent(
            deposit_reference=new_id("dpi"),
            merchant_id=request.merchant_id,
            customer_id=request.customer_id,
            mt5_login=request.mt5_login,
            amount_minor=request.amount_minor,
            currency=request.currency,
        )
        existing = store.insert_intent(intent, idempotency_key, request.digest())
        if existing is None:
            return Created(intent, replayed=False)
        stored, digest = existing
        if digest != request.digest():
            return IntentRefused(
                "idempotency_key_reused", "this Idempotency-Key was used for another request"
            )
        return Created(stored, replayed=True)
