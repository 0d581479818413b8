"""The pure core of mt5-credit: no I/O, no clock, no randomness (times and ids come in as arguments)."""
