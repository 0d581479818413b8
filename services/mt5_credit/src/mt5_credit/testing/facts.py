"""The money facts mt5-credit consumes (payments.events), as payment-state publishes them: the bodies
of PaymentCaptured, RefundSucceeded and ChargebackReceived (without the envelope), keyed by the
payment id ``pay-<PSP payment id>``."""

from __future__ import annotations

import json
from typing import Any


def payment_id_for(pi: str) -> str:
    """Our payment id of the PSP payment ``pi`` in these tests."""
    return f"pay-{pi}"


def captured_body(
    ref: str | None, amount_minor: int, currency: str = "USD", pi: str = "pi_1"
) -> dict[str, Any]:
    return {
        "merchant_id": "m1",
        "operation_id": f"op-{pi}",
        "provider": "simpsp",
        "provider_payment_id": pi,
        "amount_minor": amount_minor,
        "currency": currency,
        "deposit_reference": ref,
    }


def refunded_body(ref: str, amount_minor: int, refund_id: str, currency: str = "USD") -> dict[str, Any]:
    return {
        "merchant_id": "m1",
        "refund_id": refund_id,
        "operation_id": f"op-{refund_id}",
        "provider": "simpsp",
        "provider_refund_id": f"re_{refund_id}",
        "amount_minor": amount_minor,
        "currency": currency,
        "deposit_reference": ref,
    }


def charged_back_body(ref: str, amount_minor: int, cb_id: str, currency: str = "USD") -> dict[str, Any]:
    return {
        "merchant_id": "m1",
        "chargeback_id": cb_id,
        "provider": "simpsp",
        "provider_dispute_id": f"dp_{cb_id}",
        "amount_minor": amount_minor,
        "currency": currency,
        "deposit_reference": ref,
        "reason": "fraudulent",
    }


def repair_body(
    fact_type: str,
    fact: dict[str, Any],
    *,
    repair_id: int = 1,
    repair_type: str = "mt5_credit",
    mt5_login: int | None = 5001,
    amount_minor: int | None = None,
    requested_by: str = "alice",
    approved_by: str = "bob",
    target: str = "mt5_credit",
) -> dict[str, Any]:
    """An approved ExecuteRepair (v2) as the reconciler sends it, carrying the money fact."""
    return {
        "repair_id": repair_id,
        "case_id": 500 + repair_id,
        "repair_type": repair_type,
        "target": target,
        "source_key": f"capture:{fact.get('operation_id', fact.get('refund_id'))}",
        "requested_by": requested_by,
        "approved_by": approved_by,
        "amount_minor": fact["amount_minor"] if amount_minor is None else amount_minor,
        "currency": fact["currency"],
        "mt5_login": mt5_login,
        "reason": "the credit was lost",
        "fact_type": fact_type,
        "fact_json": json.dumps(fact),
        "command_digest": "c" * 64,
    }
