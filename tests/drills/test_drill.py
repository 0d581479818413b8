"""Fault drills in the long tier (``make test-long``, CI's step after ``make test``): two short
seeds of the whole product under a random schedule of faults, and every saved schedule of a seed
that once failed (``schedules/*.json``), replayed as a regression test. ``make drills`` runs the
long ones (20 seeds of 60 s). A drill takes about a minute on a quiet machine, past the budget of
a test in ``make test``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.drill import faults
from backbone.testing.drill.checker import Checker
from backbone.testing.drill.infra import PrivateInfra
from backbone.testing.drill.run import DrillResult, run_seed
from backbone.testing.drill.traffic import LOGINS

pytestmark = pytest.mark.integration

SCHEDULES = sorted((Path(__file__).parent / "schedules").glob("*.json"))


@pytest.fixture(scope="module")
def infra() -> Iterator[PrivateInfra]:
    with PrivateInfra() as private:
        yield private


def _explain(result: DrillResult) -> str:
    broken = {k: v for k, v in result.violations.items() if v}
    return (
        f"seed {result.seed} broke {broken}; schedule {result.workdir / 'schedule.json'},"
        f" history {result.workdir / 'history.json'}"
    )


@pytest.mark.long  # make test-long: a drill is a minute of the whole product, past a test's budget
@pytest.mark.timeout(1200)
def test_a_short_drill_keeps_every_promise_and_its_checks_are_not_blind(
    infra: PrivateInfra, tmp_path: Path
) -> None:
    """One seed (``DRILL_SEED``, default 3: processes killed and paused, PostgreSQL crashed, MT5
    and PSP calls failing, a secret rotated; a broker restart is the next drill's) of 20 s
    of deposits, refunds, chargebacks and withdrawals under its random faults, a reconciliation
    killed mid-run among them: afterwards every check passes (every request answered, every
    acknowledged one reflected, one MT5 deal per money movement on the right login for the right
    amount, statuses forward only, facts in order, balanced journals, books = MT5 per login, one
    debit and at most one payout per approved withdrawal and nothing left in transit, no dead
    letters, a clean reconciliation, no run lock left, no case twice). Then a deal nobody made, a
    second copy of a real deposit's deal and a second copy of a withdrawal's debit are put on MT5
    behind the product's back: the deal, the withdrawal and the liability checks report them."""
    _drill_and_tamper(infra, tmp_path, int(os.environ.get("DRILL_SEED", "3")), duration_s=20)


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_drill_with_a_broker_restart_keeps_every_promise(infra: PrivateInfra, tmp_path: Path) -> None:
    """Seed 1 for 30 s (the short drill until the suite's budget): the same checks and tampering,
    with Kafka restarted under load and MT5 disconnecting every session."""
    _drill_and_tamper(infra, tmp_path, 1, duration_s=30)


def _drill_and_tamper(infra: PrivateInfra, tmp_path: Path, seed: int, *, duration_s: float) -> None:
    seen: dict[str, list[str]] = {}

    def tamper(checker: Checker) -> None:
        mt5 = checker.system.mt5
        assert mt5 is not None
        mt5.control.add_deals(LOGINS[0], "1.23", "dep:999999999")
        real = next(d for d in checker.deposits if checker.credit_rows.get(d.number))
        row = next(r for r in checker.credit_rows[real.number] if r["kind"] == "credit")
        mt5.control.add_deals(real.login, f"{row['amount_minor'] / 100:.2f}", f"dep:{row['credit_id']}")
        paid = next(w for w in checker.withdrawals if (checker.views.get(w.number) or {}).get("debit"))
        debit = (checker.views.get(paid.number) or {})["debit"]
        seen["wdr"] = [debit["comment"]]
        mt5.control.add_deals(paid.login, f"{-paid.amount_minor / 100:.2f}", debit["comment"])
        seen["deals"], seen["liability"] = checker.deals(), checker.liability()
        seen["withdrawals"] = checker.withdrawal_money()

    workdir = tmp_path / f"seed-{seed}"
    result = run_seed(seed, infra, workdir, duration_s=duration_s, deposits=10, probe=tamper)
    assert result.passed, _explain(result)
    assert any("dep:999999999" in v and "explained by nothing" in v for v in seen["deals"]), seen
    assert any("2 deals with comment 'dep:" in v for v in seen["deals"]), seen
    assert any(f"2 deals with comment {seen['wdr'][0]!r}" in v for v in seen["deals"]), seen
    assert any("2 debit deals" in v for v in seen["withdrawals"]), seen
    assert len(seen["liability"]) >= 1, seen


@pytest.mark.long  # make test-long: each replay is a minute or more of real processes
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=[p.stem for p in SCHEDULES])
def test_a_schedule_that_once_failed_now_keeps_every_promise(
    infra: PrivateInfra, tmp_path: Path, schedule: Path
) -> None:
    """A saved schedule of a seed that broke a promise once, replayed: every check passes now."""
    seed = int(schedule.stem.split("-")[1])
    result = run_seed(
        seed, infra, tmp_path / schedule.stem, duration_s=40, deposits=16, schedule=faults.load(schedule)
    )
    assert result.passed, _explain(result)
