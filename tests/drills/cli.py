"""``make drill SEED=n`` and ``make drills``: fault drills of the whole product (issue 17).

    python tests/drills/cli.py run --seed 7
    python tests/drills/cli.py run --seeds 1-20 --duration 60 --deposits 30
    python tests/drills/cli.py run --schedule tests/drills/schedules/seed-7.json
    python tests/drills/cli.py plan --seed 7          # print a seed's schedule, run nothing

The drill starts its own Kafka broker and PostgreSQL cluster (it crashes them), runs the whole
product on them, and prints per seed a table of the checks; on a failure the seed, the schedule
and the path of the full history. The last line is JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from backbone.testing.drill import faults
from backbone.testing.drill.infra import PrivateInfra
from backbone.testing.drill.run import DrillResult, run_seed
from backbone.testing.stack import REPO_ROOT
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True)
console = Console(stderr=True)


def _seeds(seed: int | None, seeds: str | None) -> list[int]:
    if seeds:
        low, _, high = seeds.partition("-")
        return list(range(int(low), int(high or low) + 1))
    return [seed if seed is not None else 1]


@app.command()
def plan(seed: Annotated[int, typer.Option()] = 1, duration: float = 60.0) -> None:
    """Print the schedule of faults of ``seed`` (process names as the harness calls them)."""
    names = [
        "gateway-api", "gateway-relay", "psp_sim", "gateway-catch-up", "payment_state-api",
        "payment_state-worker", "payment_state-consume", "payment_state-relay", "mt5_credit-api",
        "mt5_credit-consume", "mt5_credit-worker", "mt5_credit-relay", "ledger-consume", "ledger-relay",
        "ledger-api", "reconciler-consume", "reconciler-relay", "reconciler-api", faults.MT5_SIM,
    ]  # fmt: skip  # packed: a few items a line read better than one each
    for fault in faults.plan(seed, duration, names):
        print(json.dumps(asdict(fault)))


@app.command()
def run(
    seed: Annotated[int | None, typer.Option(help="one seed")] = None,
    seeds: Annotated[str | None, typer.Option(help="a range, e.g. 1-20")] = None,
    schedule: Annotated[Path | None, typer.Option(help="replay a saved schedule")] = None,
    duration: Annotated[float, typer.Option(help="seconds of traffic and faults")] = 60.0,
    deposits: Annotated[int, typer.Option(help="deposits per seed")] = 30,
    out: Annotated[Path, typer.Option(help="where each seed's logs go")] = REPO_ROOT / ".local/drills",
) -> None:
    """Run drills; exit 1 when any seed breaks a promise."""
    chosen = _seeds(seed, seeds)
    saved = faults.load(schedule) if schedule else None
    results: list[DrillResult] = []
    console.print(f"drill: starting a private Kafka broker and PostgreSQL cluster for seeds {chosen}")
    with PrivateInfra() as infra:
        for s in chosen:
            workdir = out / f"seed-{s}-{time.strftime('%Y%m%dT%H%M%S')}"
            console.rule(f"seed {s}")
            result = run_seed(s, infra, workdir, duration_s=duration, deposits=deposits, schedule=saved)
            results.append(result)
            _report(result)
    failed = [r.seed for r in results if not r.passed]
    print(json.dumps({"seeds": chosen, "failed": failed, "results": [r.as_json() for r in results]}))
    sys.exit(1 if failed else 0)


def _report(result: DrillResult) -> None:
    table = Table(
        title=f"seed {result.seed}: {'passed' if result.passed else 'FAILED'} in {result.seconds:.0f} s"
    )
    table.add_column("check")
    table.add_column("result")
    for name, found in result.violations.items():
        table.add_row(
            name, "ok" if not found else f"[red]{len(found)} violation(s)[/red]: " + "; ".join(found[:3])
        )
    console.print(table)
    console.print(f"faults: {result.summary.get('faults')}")
    console.print(f"requests: {result.summary.get('requests')}")
    console.print(f"deposits: {result.summary.get('deposits')}")
    console.print(f"withdrawals: {result.summary.get('withdrawals')}")
    if not result.passed:
        console.print(f"[red]seed {result.seed} failed[/red]; schedule: {result.workdir / 'schedule.json'}")
        console.print(f"history: {result.workdir / 'history.json'}; process logs in {result.workdir}")
        console.print(f"replay: python tests/drills/cli.py run --schedule {result.workdir / 'schedule.json'}")


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds: the processes, the broker, the cluster end


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, _interrupt)
    app()
