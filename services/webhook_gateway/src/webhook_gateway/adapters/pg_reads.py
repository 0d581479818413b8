"""What operators read of the receipts (``provider_events``), straight from PostgreSQL: a read needs
no transaction and no port of its own (as the ledger's ``adapters/pg_reads.py``). Nothing here
writes, and nothing here reads the raw body, its digest or the audit headers (which may carry the
signature): a receipt is shown by what identifies it and how it was verified."""

from __future__ import annotations

from typing import Any, Final

import psycopg

RECEIPTS_LIMIT_MAX: Final = 200
RECEIPT_FIELDS: Final = (
    "receipt_id",
    "provider",
    "provider_event_id",
    "provider_event_type",
    "provider_payment_id",
    "signature_result",
    "signature_secret",
    "card_data_redacted",
    "received_at",
    "request_id",
)
# provider_events_payment_idx (provider, provider_payment_id) answers it
_OF_PAYMENT: Final = """SELECT id, provider, provider_event_id, provider_event_type, provider_payment_id,
    signature_result, signature_secret, card_data_redacted, received_at, request_id
  FROM provider_events
  WHERE provider = %s AND provider_payment_id = %s
  ORDER BY received_at, id
  LIMIT %s"""


async def receipts_of_payment(
    conn: psycopg.AsyncConnection[Any], provider: str, provider_payment_id: str, limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` receipts of one PSP payment, in the order they were received."""
    assert 0 < limit <= RECEIPTS_LIMIT_MAX, "a bounded page"
    cursor = await conn.execute(_OF_PAYMENT, (provider, provider_payment_id, limit))
    rows = await cursor.fetchall()
    found = [dict(zip(RECEIPT_FIELDS, row, strict=True)) for row in rows]
    for receipt in found:
        receipt["received_at"] = receipt["received_at"].isoformat()
    return found
