"""Test and benchmark support: money-fact scenarios, an in-memory consumer, test databases and
topics. Never imported by production code."""
