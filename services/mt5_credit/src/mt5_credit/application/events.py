"""The events mt5-credit publishes (topic mt5.credit-events, key = payment id), built from a row.

Each is written (``CreditStore.publish``) in the same transaction as the status change it reports,
so a published event always matches a committed row and a committed change always gets its event.
"""

from __future__ import annotations

from typing import Any

from mt5_credit.domain.model import CreditKind, CreditRow


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
    }


def done_event(row: CreditRow, ticket: int) -> tuple[str, dict[str, Any]]:
    return credited(row, ticket) if row.kind is CreditKind.CREDIT else debited(row, ticket)
