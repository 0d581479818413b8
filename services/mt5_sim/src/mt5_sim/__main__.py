"""``python -m mt5_sim``: the MT5 Web API simulator (see the service README)."""

from mt5_sim.entrypoints.main import main

raise SystemExit(main())
