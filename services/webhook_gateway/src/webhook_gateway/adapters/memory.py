"""An in-memory ``ReceiptStore`` for unit tests. The store contract tests run the same cases against
it and against ``PostgresReceiptStore``, so it cannot drift from the real one unnoticed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook_gateway.application.ingest import AlreadyStored, Saved, SaveOutcome, StoreUnavailable
from webhook_gateway.domain.receipts import NewReceipt, outbox_key, provider_event_received


@dataclass(frozen=True)
class StoredEvent:
    """An outbox event as the fake keeps it: its key and its body (no envelope, no encoding)."""

    key: str
    body: dict[str, Any]


class InMemoryReceiptStore:
    """Receipts by (provider, provider_event_id) and their events; ``available = False`` simulates
    a database outage (every save raises StoreUnavailable and changes nothing)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.receipts: dict[tuple[str, str], tuple[int, NewReceipt]] = {}
        self.events: list[StoredEvent] = []
        self.available = True
        self._now_ms = now_ms
        self._next_id = 1

    async def save(self, receipt: NewReceipt) -> SaveOutcome:
        if not self.available:
            raise StoreUnavailable("in-memory store marked unavailable")
        # No await below: under asyncio this check-then-insert cannot interleave with another save.
        key = (receipt.provider, receipt.event.event_id)
        existing = self.receipts.get(key)
        if existing is not None:
            receipt_id, first = existing
            return AlreadyStored(receipt_id, first.body_sha256 == receipt.body_sha256)
        receipt_id, self._next_id = self._next_id, self._next_id + 1
        self.receipts[key] = (receipt_id, receipt)
        body = provider_event_received(receipt, receipt_id, self._now_ms)
        self.events.append(StoredEvent(outbox_key(receipt.provider, receipt.event), body))
        return Saved(receipt_id, self._now_ms)
