"""Processes: the consumer, the relay, the HTTP read API and the command line (``python -m ledger``)."""
