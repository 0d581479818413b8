"""webhook_gateway service."""
