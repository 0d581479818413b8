"""psp_sim service."""
