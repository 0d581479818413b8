"""The idempotent consumer: batch consume, one transaction per batch, offsets after commit."""

from backbone.consumer.loop import (
    BatchHandler,
    ConsumerSettings,
    IdempotentConsumer,
    InboundEvent,
    UnitOfWork,
    per_event,
)

__all__ = [
    "BatchHandler",
    "ConsumerSettings",
    "IdempotentConsumer",
    "InboundEvent",
    "UnitOfWork",
    "per_event",
]
