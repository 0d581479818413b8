"""Stripe's documented example objects (API reference: "The Balance Transaction object", "The Payout
object", "The Charge object", "The Refund object", "The Dispute object") with the metadata our Stripe
adapter writes, for the tests of the Stripe settlement input. One business day's worth: a charge, its
partial refund giving part of the fee back, a lost dispute, and the payout that settles them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, Final

from reconciler.domain.dates import BusinessCalendar

DAY: Final = date(2026, 11, 30)
WINDOW = BusinessCalendar(UTC, datetime.min.time()).window_ms(DAY)
T0 = WINDOW[0] // 1000 + 3600  # 01:00 UTC on DAY
PAYOUT_ID = "po_1OaFDbEcg9tTZuTgNYmX0PKB"


def payout(**overrides: Any) -> dict[str, Any]:
    """Stripe's example payout, made automatic and reconciled (the example is a manual one)."""
    document: dict[str, Any] = {
        "id": PAYOUT_ID,
        "object": "payout",
        "amount": 6_710,
        "arrival_date": T0 + 2 * 86_400,
        "automatic": True,
        "balance_transaction": "txn_1OaFDcEcg9tTZuTgYMR25tSe",
        "created": T0 + 86_400,
        "currency": "usd",
        "description": "STRIPE PAYOUT",
        "destination": "ba_1MtIhL2eZvKYlo2CAElKwKu2",
        "failure_balance_transaction": None,
        "failure_code": None,
        "metadata": {},
        "method": "standard",
        "reconciliation_status": "completed",
        "source_type": "card",
        "status": "paid",
        "type": "bank_account",
    }
    document.update(overrides)
    return document


def txn(txn_id: str, kind: str, amount: int, fee: int, source: Any, created: int = T0) -> dict[str, Any]:
    """Stripe's example balance transaction with its source expanded."""
    return {
        "id": txn_id,
        "object": "balance_transaction",
        "amount": amount,
        "available_on": created + 2 * 86_400,
        "created": created,
        "currency": "usd",
        "description": None,
        "exchange_rate": None,
        "fee": fee,
        "fee_details": [],
        "net": amount - fee,
        "reporting_category": kind,
        "source": source,
        "status": "available",
        "type": kind,
    }


def charge(**overrides: Any) -> dict[str, Any]:
    """A charge of a payment intent our adapter created (its metadata: reference, payment_id, merchant)."""
    document: dict[str, Any] = {
        "id": "ch_3MmlLrLkdIwHu7ix0snN0B15",
        "object": "charge",
        "amount": 10_000,
        "currency": "usd",
        "captured": True,
        "metadata": {"reference": "pay_1", "payment_id": "pay_1", "merchant_id": "m_1"},
        "payment_intent": "pi_3MmlLrLkdIwHu7ix0qlCyHBo",
        "status": "succeeded",
    }
    document.update(overrides)
    return document


def refund(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "re_1Nispe2eZvKYlo2Cd31jOCgZ",
        "object": "refund",
        "amount": 1_000,
        "charge": "ch_3MmlLrLkdIwHu7ix0snN0B15",
        "currency": "usd",
        "metadata": {"reference": "op_refund_1"},
        "payment_intent": "pi_3MmlLrLkdIwHu7ix0qlCyHBo",
        "status": "succeeded",
    }
    document.update(overrides)
    return document


def dispute(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "du_1MtJUT2eZvKYlo2CNaw2HvEv",
        "object": "dispute",
        "amount": 500,
        "charge": "ch_3MmlLrLkdIwHu7ix0snN0B15",
        "currency": "usd",
        "metadata": {},
        "payment_intent": "pi_3MmlLrLkdIwHu7ix0qlCyHBo",
        "reason": "general",
        "status": "lost",
    }
    document.update(overrides)
    return document


def day_of_transactions() -> list[dict[str, Any]]:
    """A charge (fee 320), its partial refund giving 30 of the fee back, a lost dispute (fee 1,500)
    and the payout's own transaction: the nets 9,680 - 970 - 2,000 = 6,710 are the payout."""
    return [
        txn("txn_charge", "charge", 10_000, 320, charge(), T0),
        txn("txn_refund", "refund", -1_000, -30, refund(), T0 + 60),
        txn("txn_dispute", "adjustment", -500, 1_500, dispute(), T0 + 120),
        txn("txn_payout", "payout", -6_710, 0, payout(), T0 + 86_400),
    ]
