"""The consumer's semantics over the in-memory store, for domain tests: dedup by event_id, one
transaction per batch, a failing batch retried event by event, refused events kept aside with
their reason (what the backbone dead-letters), and waiting events (``NotYet``) asked again after
every batch (the backbone asks again after every pause; the model does not hold back the rest of
their partition)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from backbone.consumer import InboundEvent, UnitOfWork
from backbone.consumer.messages import first_occurrences

from ledger.adapters.memory_store import InMemoryLedgerStore
from ledger.application.events import PostingRejected, PostingWaits, make_handler
from ledger.domain.rule_base import PostingPolicy
from ledger.testing.facts import Fact

TOPICS = {"payments": "payments.events", "mt5": "mt5.credit-events", "repairs": "recon.repair-commands"}


class MemoryLedger:
    def __init__(self, policy: PostingPolicy | None = None, store: InMemoryLedgerStore | None = None) -> None:
        self.store = store or InMemoryLedgerStore()
        self._handler = make_handler(policy or PostingPolicy(), lambda _: self.store)
        self._uow = UnitOfWork(cast(Any, None), None, "ledger-test")
        self.processed: set[str] = set()
        self.dead_letters: dict[str, str] = {}
        self.waiting: dict[str, InboundEvent] = {}  # event_id -> event that raised NotYet
        self._letters: dict[str, InboundEvent] = {}

    def deliver(self, facts: Sequence[Fact]) -> None:
        """One consumer batch."""
        events = first_occurrences([f.inbound(TOPICS[f.role]) for f in facts])
        fresh = [e for e in events if e.event_id not in self.processed]
        if fresh:
            try:
                with self.store.transaction():
                    self._handler(self._uow, fresh)
                for event in fresh:
                    self._settled(event)
            except (PostingRejected, PostingWaits):
                for event in fresh:
                    self._one(event)
        self._ask_waiting_again()

    def _ask_waiting_again(self) -> None:
        """Every waiting event once more, until a round books none of them."""
        while self.waiting:
            before = len(self.waiting)
            for event in list(self.waiting.values()):
                self._one(event)
            if len(self.waiting) == before:
                return

    def _one(self, event: InboundEvent) -> None:
        try:
            with self.store.transaction():
                self._handler(self._uow, [event])
            self._settled(event)
        except PostingRejected as exc:
            self.dead_letters[event.event_id] = str(exc)
            self._letters[event.event_id] = event
        except PostingWaits:
            self.waiting[event.event_id] = event

    def _settled(self, event: InboundEvent) -> None:
        """Applied: a dead letter of the same event (an earlier delivery) is resolved by it."""
        self.processed.add(event.event_id)
        self.waiting.pop(event.event_id, None)
        self.dead_letters.pop(event.event_id, None)
        self._letters.pop(event.event_id, None)

    def replay_dead_letters(self, rounds_max: int = 10) -> None:
        """What an operator does once the cause is gone: replay every dead letter, in the order they
        were dead-lettered, until none is left or a round changes nothing."""
        for _ in range(rounds_max):
            waiting = [self._letters[event_id] for event_id in self.dead_letters]
            if not waiting:
                return
            for event in waiting:
                if event.event_id not in self.processed:
                    self._one(event)
            if len(self.dead_letters) == len(waiting):
                return
