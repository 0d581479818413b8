"""The simpsp provider's report files: the settlement report (one row per balance transaction)
and the bank-deposit file (one row per payout batch), as CSV with these header columns in this
order. The PSP simulator writes them; the reconciler reads them."""

from __future__ import annotations

from typing import Final

SETTLEMENT_COLUMNS: Final = (
    "business_date",
    "balance_transaction_id",
    "type",
    "payment_intent_id",
    "source_id",
    "reference",
    "source_reference",
    "currency",
    "gross_minor",
    "fee_minor",
    "net_minor",
    "payout_batch_id",
    "created_at",
)
BANK_COLUMNS: Final = (
    "deposit_id",
    "payout_batch_id",
    "business_date",
    "value_date",
    "currency",
    "amount_minor",
    "item_count",
    "bank_reference",
)
