"""Builders of what the store-level tests put in place before the rule under test: a mapped account
with a deposit intent, and pending credit or debit rows (on either store: ``CreditStore``)."""

from __future__ import annotations

from mt5_credit.application.ports import CreditStore
from mt5_credit.domain.intake import Account, DepositIntent, NewRow
from mt5_credit.domain.model import CreditKind, DebitReason


def put_intent(
    store: CreditStore,
    deposit_reference: str,
    *,
    login: int = 5001,
    amount_minor: int = 10_000,
    enabled: bool = True,
    key: str | None = None,
    digest: str = "d",
) -> None:
    """Map ``login`` to cust-1 (USD) and store merchant m1's intent for it under ``key``."""
    store.upsert_account(Account(login, "cust-1", "USD", enabled))
    intent = DepositIntent(deposit_reference, "m1", "cust-1", login, amount_minor, "USD")
    assert store.insert_intent(intent, key or f"k{deposit_reference}", digest) is None


def new_row(
    source_key: str,
    deposit_reference: str,
    amount_minor: int = 10_000,
    *,
    kind: CreditKind = CreditKind.CREDIT,
    original_credit_id: int | None = None,
) -> NewRow:
    """A USD row for cust-1's login 5001 (a debit is a refund of ``original_credit_id``)."""
    return NewRow(
        kind, source_key, deposit_reference, 5001, "cust-1", amount_minor, "USD", amount_minor, "USD", None,
        debit_reason=None if kind is CreditKind.CREDIT else DebitReason.REFUND,
        original_credit_id=original_credit_id,
    )  # fmt: skip  # packed: a few items a line read better than one each


def put_row(
    store: CreditStore, row: NewRow, *, payment_id: str = "pay_1", fact_at_ms: int | None = None
) -> int | None:
    """Insert ``row`` as payment ``payment_id``'s (PSP payment pi_1): its id, or None if its key exists."""
    return store.insert_row(
        row,
        payment_id=payment_id,
        provider="simpsp",
        provider_payment_id="pi_1",
        source_reference=None,
        fact_at_ms=fact_at_ms,
    )
