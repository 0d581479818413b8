"""The reconciler's operator commands (typer + rich), run by ``python -m reconciler`` (``__main__.py``,
through ``backbone.cli.dispatch``) beside its processes (api, consume, relay, monitor, migrate, dlq).

    run --date D [--wait]           reconcile one business date (progress on stderr, summary table)
    import-settlement FILE --date D the PSP's settlement report from a file drop
    import-bank FILE --date D       the bank-deposit file from a file drop
    runs list [--date D] | runs show ID
    cases list [--date D] [--status S] [--class C] | cases show ID
    cases acknowledge|reopen|export|decide, repairs ..., audit list: through the API (operator_cli.py)

Exit codes: 0 done (a run: clean), 1 a run with discrepancies, 3 a run incomplete, 2 bad input or
configuration, 4 another run of the date holds the lock. ``--json`` prints one JSON object instead of
tables.

This module assembles the commands; imports and runs are ``run_cli``'s, the reads of runs and cases
``reads_cli``'s, operators' acts through the API ``operator_cli``'s.
"""

from __future__ import annotations

import typer

from reconciler.entrypoints import operator_cli, reads_cli, run_cli

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The reconciler: PSP, books and MT5 agree."
)
runs_app = typer.Typer(no_args_is_help=True, help="Reconciliation runs.")
cases_app = typer.Typer(no_args_is_help=True, help="Discrepancy cases.")
app.add_typer(runs_app, name="runs")
app.add_typer(cases_app, name="cases")
app.add_typer(operator_cli.repairs_app, name="repairs")
app.add_typer(operator_cli.audit_app, name="audit")
runs_app.command(name="list")(reads_cli.runs_list)
runs_app.command(name="show")(reads_cli.runs_show)
cases_app.command(name="acknowledge")(operator_cli.acknowledge)
cases_app.command(name="reopen")(operator_cli.reopen)
cases_app.command(name="export")(operator_cli.export)
cases_app.command(name="decide")(operator_cli.decide)
cases_app.command(name="list")(reads_cli.cases_list)
cases_app.command(name="show")(reads_cli.cases_show)
app.command(name="import-settlement")(run_cli.import_settlement)
app.command(name="import-bank")(run_cli.import_bank)
app.command(name="run")(run_cli.run)
