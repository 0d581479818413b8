"""Fault drills of the whole product (issue 17): real processes, a seeded schedule of faults, a
recorded history of every request, and a checker of the promises once the system is quiet again.

    python -m backbone.testing.drill run --seed 7      # one seed (make drill SEED=7)
    python -m backbone.testing.drill run --seeds 1-20  # make drills

See docs/operations/drills.md for the faults, the checks and how a failing seed becomes a test.
"""
