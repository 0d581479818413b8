"""ledger service."""
