"""Adapters: PostgreSQL store and reads, the in-memory fake, JournalPosted encoding, roles."""
