"""Adapters: the PostgreSQL receipt store (and its in-memory twin for tests)."""
