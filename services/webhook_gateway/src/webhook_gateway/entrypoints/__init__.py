"""Entrypoints: the HTTP server and the outbox relay."""
