"""``python -m psp_sim``: the simulated PSP (see README.md)."""

from psp_sim.entrypoints.main import main

if __name__ == "__main__":
    main()
