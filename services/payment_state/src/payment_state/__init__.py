"""payment_state service."""
