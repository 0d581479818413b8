"""``python -m ledger``: see ledger.entrypoints.cli."""

from ledger.entrypoints.cli import main

raise SystemExit(main())
