"""``JournalPosted`` events for the outbox (topic ``ledger.events``), one per posted journal.

Key (envelope ``payment_id``): the journal's payment, or the journal's reference for journals about
no single payment (settlement batches), as the topic catalogue asks of such messages.
``source_event_id`` is the consumed event's id, or the settlement import's / operator action's id
(a UUID as well) for journals that came from no event; ``causation_id`` is set only for events.
"""

from __future__ import annotations

from typing import Final

from backbone.outbox import OutboxMessage, OutboxWriter

from ledger.domain.chain import PostedJournal, epoch_us
from ledger.domain.journals import SourceType

EVENT_TYPE: Final = "JournalPosted"


def journal_posted(outbox: OutboxWriter, topic: str, journal: PostedJournal) -> OutboxMessage:
    draft = journal.draft
    body = {
        "journal_id": journal.journal_id,
        "reference": draft.reference,
        "business_date": draft.business_date.isoformat(),
        "source_event_id": draft.source.source_id,
        "entries": [
            {
                "account": e.account.code,
                "direction": e.direction.value,
                "amount_minor": e.amount_minor,
                "currency": e.currency,
            }
            for e in draft.entries
        ],
    }
    from_event = draft.source.source_type is SourceType.EVENT
    return outbox.event(
        topic,
        EVENT_TYPE,
        draft.payment_id or draft.reference,
        body,
        occurred_at_ms=epoch_us(journal.posted_at) // 1000,
        causation_id=draft.source.source_id if from_event else None,
    )
