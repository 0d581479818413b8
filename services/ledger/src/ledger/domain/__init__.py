"""The ledger's pure core: chart of accounts, journals, posting rules, the hash chain, decisions.

No I/O, no clock, no randomness: every function takes what it needs (times, ids, stored state) as
arguments and returns decisions. Imports only the standard library and backbone's pure modules
(money, invariants).
"""
