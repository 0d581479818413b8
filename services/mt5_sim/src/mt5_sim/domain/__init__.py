"""The simulator's pure core: retcodes, the auth hash, parameter rules, the balance decision, faults.

Nothing here does I/O, reads a clock or draws random numbers: callers pass ``now`` and random bytes.
"""
