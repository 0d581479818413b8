"""mt5_credit service."""
