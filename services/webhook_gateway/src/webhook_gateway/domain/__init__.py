"""The gateway's pure core: signature verification, minimal event reading, receipt decisions.

Nothing here does I/O, reads a clock or draws random numbers (a unit test enforces the imports).
"""
