"""Test support: the real stack (Kafka + PostgreSQL), throwaway databases and topics, processes.

Used by every service's integration tests and by the benchmarks; never by production code.
"""
