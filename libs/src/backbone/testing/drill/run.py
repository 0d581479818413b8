"""One drill: the product on the drill's private Kafka and PostgreSQL, traffic and faults for
``duration_s``, then calm, quiescence and the checks. Everything it did is written to its workdir:
``schedule.json`` (replayable), ``history.json`` and every process's log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backbone.testing.drill.checker import Checker
from backbone.testing.drill.faults import MT5_SIM, Fault, plan, save
from backbone.testing.drill.history import History
from backbone.testing.drill.infra import PrivateInfra
from backbone.testing.drill.injector import Injector
from backbone.testing.drill.recon_checks import reconciliation, runs_recovered
from backbone.testing.drill.traffic import Deposit, Withdrawal, plan_deposits, plan_withdrawals
from backbone.testing.drill.workload import Workload
from backbone.testing.system import System


@dataclass
class DrillResult:
    seed: int
    workdir: Path
    violations: dict[str, list[str]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not any(self.violations.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "passed": self.passed,
            "seconds": round(self.seconds, 1),
            "workdir": str(self.workdir),
            "violations": {k: v for k, v in self.violations.items() if v},
            **self.summary,
        }


def run_seed(
    seed: int,
    infra: PrivateInfra,
    workdir: Path,
    *,
    duration_s: float = 60.0,
    deposits: int = 30,
    schedule: list[Fault] | None = None,
    reconcile: bool = True,
    probe: Callable[[Checker], None] | None = None,
) -> DrillResult:
    """``probe``: called with the checker after the checks, while the system still runs (a test
    uses it to prove the checks are not blind)."""
    started = time.monotonic()
    assert infra.stack is not None
    workdir.mkdir(parents=True, exist_ok=True)
    history = History()
    result = DrillResult(seed, workdir)
    # a real PSP retries a webhook for days; the harness's 8 quick attempts would give up within
    # one restart of the gateway
    extra = {"psp_sim": {"PSP_SIM_WEBHOOK_ATTEMPTS_MAX": "100"}}
    with System(infra.stack, workdir, with_reconciler=True, extra_env=extra).start() as system:
        workload = Workload(system, history)
        workload.open_accounts()
        faults = schedule if schedule is not None else plan(seed, duration_s, [*system.procs, MT5_SIM])
        save(faults, workdir / "schedule.json")
        planned = plan_deposits(seed, deposits, duration_s)
        withdrawals = plan_withdrawals(seed, planned)
        injector = Injector(system, infra, history)
        t0 = time.monotonic()
        history.restart_clock()
        workload.start(planned, t0, withdrawals)
        try:
            injector.play(faults, t0)
            rest = t0 + duration_s - time.monotonic()
            if rest > 0:
                time.sleep(rest)
            injector.calm()
            stragglers = workload.join(400)
            if stragglers:
                history.note(f"clients still running after the wait: {stragglers}")
            checker = Checker(system, workload, history, planned, withdrawals)
            checker.settle_unknowns()
            unsettled = checker.converge(240)
            result.violations = checker.run_all()
            if unsettled:
                result.violations["every deposit and withdrawal reached a final state"] = [
                    f"{name} did not settle within the quiescence window" for name in unsettled
                ]
            if reconcile:
                try:
                    found, run = reconciliation(system)
                except AssertionError as error:  # the run printed nothing (e.g. the date stayed locked)
                    found, run = [str(error)], {}
                result.violations["the day reconciles clean"] = found
                result.summary["reconciliation"] = {k: run.get(k) for k in ("status", "counts")}
                result.violations["killed reconciliations let go of the date, no case twice"] = (
                    runs_recovered(system, history)
                )
            if probe is not None:
                probe(checker)
        finally:
            injector.stop()
            (workdir / "history.json").write_text(history.dump())
        _summarize(result, history, planned, withdrawals)
    result.seconds = time.monotonic() - started
    (workdir / "result.json").write_text(json.dumps(result.as_json(), indent=1, default=str))
    return result


def _summarize(
    result: DrillResult, history: History, planned: list[Deposit], withdrawals: list[Withdrawal]
) -> None:
    result.summary.update(history.summary())
    result.summary["deposits"] = {
        "planned": len(planned),
        "ended": dict(sorted(_count(d.ended.split(" (")[0] for d in planned).items())),
    }
    result.summary["withdrawals"] = {
        "planned": dict(sorted(_count(w.fate for w in withdrawals).items())),
        "ended": dict(sorted(_count(w.ended.split(" (")[0] for w in withdrawals).items())),
        "status": dict(sorted(_count(w.seen[-1] if w.seen else "-" for w in withdrawals).items())),
    }
    result.summary["notes"] = history.notes[-30:]


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts
