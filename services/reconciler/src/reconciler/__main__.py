"""``python -m reconciler``: see reconciler.entrypoints.cli."""

from reconciler.entrypoints.cli import main

raise SystemExit(main())
