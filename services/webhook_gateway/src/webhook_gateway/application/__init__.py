"""Use cases: ingest one webhook delivery (verify, read, store once with its outbox event)."""
