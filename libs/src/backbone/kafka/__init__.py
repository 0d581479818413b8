"""Kafka plumbing: client configuration with its safety options, and the topic catalogue."""
