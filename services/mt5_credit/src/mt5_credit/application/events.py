"""The events mt5-credit publishes (topic mt5.credit-events, key = payment id), built from a row.

Each is written (``CreditStore.publish``) in the same transaction as the status change it reports,
so a published event always matches a committed row and a committed change always gets its event.
"""

from __future__ import annotations

from typing import Any

from mt5_credit.domain.model import CreditKind, CreditRow
from mt5_credit.domain.withdrawals import Withdrawal


def _fx_rate(row: CreditRow) -> str | None:
    return None if row.fx_rate is None else format(row.fx_rate, "f")


def credited(row: CreditRow, ticket: int) -> tuple[str, dict[str, Any]]:
    return "Mt5Credited", {
        "credit_id": row.id,
        "deposit_reference": row.deposit_reference,
        "mt5_login": row.mt5_login,
        "amount_minor": row.amount_minor,
        "currency": row.currency,
        "deal_ticket": ticket,
        "provider": row.provider,
        "provider_payment_id": row.provider_payment_id or "",
        "payment_amount_minor": row.payment_amount_minor,
        "payment_currency": row.payment_currency,
        "fx_rate": _fx_rate(row),
        "credit_reason": row.credit_reason.value,
        "withdrawal_id": row.withdrawal_id,
    }


def debited(row: CreditRow, ticket: int) -> tuple[str, dict[str, Any]]:
    return "Mt5Debited", {
        "debit_id": row.id,
        "mt5_login": row.mt5_login,
        "amount_minor": row.amount_minor,
        "currency": row.currency,
        "deal_ticket": ticket,
        "debit_reason": row.debit_reason or "",
        "source_reference": row.source_reference or "",
        "original_credit_id": row.original_credit_id,
        "payment_amount_minor": row.payment_amount_minor,
        "payment_currency": row.payment_currency,
        "fx_rate": _fx_rate(row),
    }


def failed(row: CreditRow, retcode: str | None, reason: str) -> tuple[str, dict[str, Any]]:
    return "Mt5CreditFailed", {
        "credit_id": row.id,
        "deposit_reference": row.deposit_reference,
        "mt5_login": row.mt5_login,
        "amount_minor": row.amount_minor,
        "currency": row.currency,
        "retcode": retcode,
        "reason": reason[:500],
    }


def needs_attention(row: CreditRow, status: str, reason: str) -> tuple[str, dict[str, Any]]:
    return "Mt5CreditNeedsAttention", {
        "credit_id": row.id,
        "deposit_reference": row.deposit_reference,
        "mt5_login": row.mt5_login,
        "amount_minor": row.amount_minor,
        "currency": row.currency,
        "operation_kind": row.kind.value,
        "credit_status": status,
        "reason": reason[:500],
        "case_id": None,
        "comment": row.comment,  # v3: wdr:/wbk: for a withdrawal's rows
    }


def done_event(row: CreditRow, ticket: int) -> tuple[str, dict[str, Any]]:
    return credited(row, ticket) if row.kind is CreditKind.CREDIT else debited(row, ticket)


def payout_command(w: Withdrawal, debit: CreditRow) -> dict[str, Any]:
    """``CreatePayout`` for payment-state, once the withdrawal's MT5 debit is done."""
    return {
        "merchant_id": w.merchant_id,
        "idempotency_key": w.withdrawal_id,
        "withdrawal_id": w.withdrawal_id,
        "provider": w.provider,
        "amount_minor": w.amount_minor,
        "currency": w.currency,
        "destination_token": w.destination_token,
        "source_payment_id": w.source_payment_id,
        "mt5_login": w.mt5_login,
        "mt5_debit_id": debit.id,
    }
