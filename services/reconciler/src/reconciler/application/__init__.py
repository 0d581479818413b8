"""Use cases over the ports: intake of events, imports, runs."""
