"""mt5_sim service."""
