"""The idempotent consumer: batch consume, one transaction per batch, offsets after commit."""

from backbone.consumer.loop import IdempotentConsumer
from backbone.consumer.messages import BatchHandler, InboundEvent, NotYet, Refuse, UnitOfWork, per_event
from backbone.consumer.settings import ConsumerSettings

__all__ = [
    "BatchHandler",
    "ConsumerSettings",
    "IdempotentConsumer",
    "InboundEvent",
    "NotYet",
    "Refuse",
    "UnitOfWork",
    "per_event",
]
