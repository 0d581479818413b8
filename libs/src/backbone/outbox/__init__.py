"""Transactional outbox: ``OutboxWriter`` inside the business transaction, ``OutboxRelay`` to Kafka."""

from backbone.outbox.writer import OutboxMessage, OutboxWriter

__all__ = ["OutboxMessage", "OutboxWriter"]
