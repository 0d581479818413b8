"""Use cases: post journals for consumed events, import settlements, correct, verify, rebuild.

Each use case runs in one unit of work on a ``LedgerStore`` (ports.py): lock the chain head, read
what the decision needs, let the domain decide, then append journals, balance deltas and the
``JournalPosted`` outbox rows together.
"""
