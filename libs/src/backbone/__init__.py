"""Shared backbone of the deposit services.

Importable, never run on its own: money, ids, invariants, settings, logs, metrics, health,
the Avro codec, Postgres migrations, the transactional outbox (writer + relay) and the idempotent
Kafka consumer loop. Services wire these together in their own entrypoints.
"""
