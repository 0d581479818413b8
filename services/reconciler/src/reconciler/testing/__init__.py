"""Builders and fixtures for the reconciler's tests."""
