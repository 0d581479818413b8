"""Repairs as the reconciler sends them: a settlement row (the PSP report's, as the reconciler
imported it) and the ``ExecuteRepair`` v2 body carrying it, and the command as the consumer
decodes it (``InboundEvent``) for tests that call the handler in process."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

from backbone.avro import DecodedEvent
from backbone.avro.envelope import Envelope
from backbone.consumer.messages import InboundEvent

_ids = itertools.count(1)


def settlement_row(
    payment_id: str,
    payment_intent_id: str,
    gross_minor: int,
    *,
    row_type: str = "charge",
    source_id: str | None = None,
    source_reference: str | None = None,
    currency: str = "EUR",
    fee_minor: int = 0,
) -> dict[str, Any]:
    """One settlement row (the reconciler's ``SETTLEMENT_FIELDS``)."""
    txn = f"txn_{next(_ids)}"
    return {
        "source_key": f"simpsp|settlement|{txn}",
        "balance_transaction_id": txn,
        "type": row_type,
        "payment_intent_id": payment_intent_id,
        "source_id": source_id or f"ch_{payment_intent_id}",
        "reference": payment_id,
        "source_reference": source_reference,
        "currency": currency,
        "gross_minor": gross_minor,
        "fee_minor": fee_minor,
        "net_minor": gross_minor - fee_minor,
        "payout_batch_id": "po_20261201_EUR_001_00000000",
        "created_at_ms": 1_800_000_000_000,
    }


def repair_body(row: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """An approved ``apply_provider_fact`` repair of ``row`` for payment-state (ExecuteRepair v2)."""
    repair_id = next(_ids)
    body: dict[str, Any] = {
        "repair_id": repair_id,
        "case_id": 1000 + repair_id,
        "repair_type": "apply_provider_fact",
        "target": "payment_state",
        "source_key": row["source_key"],
        "requested_by": "alice",
        "approved_by": "bob",
        "amount_minor": abs(int(row["gross_minor"])),
        "currency": row["currency"],
        "mt5_login": None,
        "reason": "webhook lost; the PSP settled it",
        "fact_type": "SettlementRow",
        "fact_json": json.dumps(row, sort_keys=True),
        "command_digest": f"{repair_id:064x}",
    }
    return {**body, **overrides}


def repair_event(payment_id: str, body: dict[str, Any], event_id: str | None = None) -> InboundEvent:
    """The command as the consumer hands it to the handler (a fresh event id unless given)."""
    envelope = Envelope(
        event_id or str(uuid.uuid4()), "ExecuteRepair", payment_id, 1_800_000_000_000, "reconciler", 2,
        None, None,
    )  # fmt: skip  # packed: a few items a line read better than one each
    decoded = DecodedEvent(envelope, "ExecuteRepair", 2, {"envelope": envelope, **body})
    return InboundEvent(decoded, "recon.repair-commands", 0, next(_ids))
