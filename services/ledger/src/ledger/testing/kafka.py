"""Throwaway ledger topics and producing money facts to them, for tests and the benchmark."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from backbone.avro import AvroCodec
from backbone.testing import kafka as test_kafka
from confluent_kafka import Producer

from ledger.testing.facts import Fact

LEDGER_EVENTS = frozenset({"JournalPosted"})
REPAIR_COMMANDS = frozenset({"ExecuteRepair"})
PAYMENT_EVENTS = frozenset(
    {
        "PaymentRequiresAction",
        "PaymentAuthorized",
        "PaymentCaptured",
        "PaymentCanceled",
        "PaymentFailed",
        "RefundSucceeded",
        "RefundFailed",
        "ChargebackReceived",
        "PaymentNeedsAttention",
        "PayoutPaid",
        "PayoutFailed",
        "PayoutReturned",
    }
)
MT5_EVENTS = frozenset({"Mt5Credited", "Mt5Debited", "Mt5CreditFailed", "Mt5CreditNeedsAttention"})
REPAIR_OUTCOMES = frozenset({"RepairOutcome"})


@dataclass(frozen=True)
class LedgerTopics:
    payments: str
    mt5: str
    events: str
    repairs: str
    outcomes: str
    partitions: int = 3

    @classmethod
    def unique(cls, partitions: int = 3) -> LedgerTopics:
        return cls(
            test_kafka.unique_topic("lp"),
            test_kafka.unique_topic("lm"),
            test_kafka.unique_topic("le"),
            test_kafka.unique_topic("lr"),
            test_kafka.unique_topic("lo"),
            partitions,
        )

    def env(self) -> dict[str, str]:
        return {
            "LEDGER_PAYMENTS_TOPIC": self.payments,
            "LEDGER_MT5_TOPIC": self.mt5,
            "LEDGER_EVENTS_TOPIC": self.events,
            "LEDGER_REPAIRS_TOPIC": self.repairs,
            "LEDGER_REPAIR_OUTCOMES_TOPIC": self.outcomes,
            "CONSUMER_TOPICS": f"{self.payments},{self.mt5},{self.repairs}",
        }

    def create(self, bootstrap: str) -> None:
        for name, events in (
            (self.payments, PAYMENT_EVENTS),
            (self.mt5, MT5_EVENTS),
            (self.events, LEDGER_EVENTS),
            (self.repairs, REPAIR_COMMANDS),
            (self.outcomes, REPAIR_OUTCOMES),
        ):
            test_kafka.create_topics(bootstrap, test_kafka.probe_catalogue(name, self.partitions, events))

    def delete(self, bootstrap: str) -> None:
        test_kafka.delete_topics(
            bootstrap, [self.payments, self.mt5, self.events, self.repairs, self.outcomes]
        )

    def topic_of(self, fact: Fact) -> str:
        return {"payments": self.payments, "mt5": self.mt5, "repairs": self.repairs}[fact.role]


def produce(bootstrap: str, topics: LedgerTopics, facts: Iterable[Fact], codec: AvroCodec) -> int:
    """Produce facts keyed by payment_id (per-payment order kept); returns how many."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,  # no duplicates or reordering from producer retries
            "partitioner": "murmur2_random",  # the same partition for a key as every other client
            "linger.ms": 20,
        }
    )
    count = 0
    for fact in facts:
        producer.produce(topics.topic_of(fact), key=fact.payment_id.encode(), value=fact.encode(codec))
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return count
