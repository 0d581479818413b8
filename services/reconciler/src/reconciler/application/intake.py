"""The read models, fed by the idempotent consumer: one batch handler for payments.events,
mt5.credit-events and ledger.events.

The backbone's consumer calls it inside the batch transaction after the dedup rows, so a record
and its event's dedup row commit together. An event the reconciler keeps but cannot read
(``IntakeRefused``) is the backbone's ``Refuse``: dead-lettered at once with the reason, the rest of
the batch kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from backbone.consumer import InboundEvent, Refuse, UnitOfWork
from backbone.logs import get_logger

from reconciler.application.ports import RecordStore
from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.intake import EventInfo, IntakeRefused, records_of
from reconciler.domain.records import Record

log = get_logger(__name__)


def make_handler(
    calendar: BusinessCalendar, store_for: Callable[[UnitOfWork], RecordStore]
) -> Callable[[UnitOfWork, Sequence[InboundEvent]], None]:
    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        records: list[Record] = []
        for event in events:
            env = event.event.envelope
            info = EventInfo(env.event_id, event.event_type, env.payment_id, env.occurred_at_ms)
            try:
                kept = records_of(info, event.event.body, calendar)
            except IntakeRefused as refused:
                log.warning("reconciler.intake_refused", event_id=env.event_id, reason=str(refused))
                raise Refuse(str(refused), env.event_id) from None
            records.extend(kept)
        if records:
            store_for(uow).keep(records)

    return handle
