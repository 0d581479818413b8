"""``python -m ops_console``: see ops_console.entrypoints.cli."""

from ops_console.entrypoints.cli import main

raise SystemExit(main())
