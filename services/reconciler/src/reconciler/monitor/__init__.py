"""The streaming monitor (``python -m reconciler monitor``): near-real-time, non-authoritative alerts
that a captured deposit was not credited, or a credit not booked, within minutes. ``watch`` is the
pure join and its timers; ``app`` the faust-streaming adapter around it. The daily run stays the proof.
"""
