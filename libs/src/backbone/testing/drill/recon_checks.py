"""The drill's promises about the reconciler, checked once the faults are over.

The day reconciles clean; each reconciliation killed mid-run let go of its date; no run is left
``running``, nobody holds a run lock, and no case was opened or announced twice.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Final

import psycopg

from backbone.testing.drill.history import History
from backbone.testing.drill.injector import RECON_BUSY_EXIT, RECON_LOCK_WAIT_S
from backbone.testing.system import System

RECON_LOCK_NAMESPACE: Final = 0x5EC0  # the reconciler's run lock: pg_advisory_lock(0x5EC0, date)


def reconciliation(system: System, attempts: int = 3) -> tuple[list[str], dict[str, Any]]:
    """Today's run must be clean; a run that is not is tried again a little later (the
    reconciler's read models may still be catching up), then its findings are violations."""
    day = dt.datetime.now(dt.UTC).date().isoformat()
    result: dict[str, Any] = {}
    for _ in range(attempts):
        result = system.reconcile(day)
        if result.get("status") == "clean":
            return [], result
        time.sleep(10)
    findings = result.get("findings") or []
    return [f"reconciliation {result.get('status')}: {f}" for f in findings] or [
        f"reconciliation {result.get('status')}: {result}"
    ], result


def runs_recovered(system: System, history: History) -> list[str]:
    """After the final run: each reconciliation killed mid-run let go of its date (its re-run
    got the lock within ``RECON_LOCK_WAIT_S``), no run is left ``running``, nobody holds a run
    lock, and no case was opened twice or announced twice (CaseOpened once per opening)."""
    out = []
    for f in history.faults:
        if f.kind != "recon_kill":
            continue
        if "rerun_exit" not in f.detail:
            out.append(f"the reconciliation killed at {f.at}s was never run again: {f.detail}")
        elif f.detail["rerun_exit"] == RECON_BUSY_EXIT:
            out.append(
                f"the reconciliation killed at {f.at}s ({f.detail['step']}): its re-run found the date"
                f" locked for {f.detail['lock_wait_s']} s (more than {RECON_LOCK_WAIT_S:.0f} s)"
            )
    with psycopg.connect(system.dbs["reconciler"], autocommit=True) as conn:
        running = conn.execute("SELECT id, business_date FROM runs WHERE status = 'running'").fetchall()
        out += [f"run {run} of {day} is still 'running' after the final run" for run, day in running]
        locks = conn.execute(_RUN_LOCKS, (RECON_LOCK_NAMESPACE,)).fetchall()
        out += [f"backend {pid} still holds the run lock of day {day}" for pid, day in locks]
        announced: dict[str, int] = dict(
            conn.execute(
                "SELECT message_key, count(*) FROM outbox WHERE event_type = 'CaseOpened' GROUP BY 1"
            ).fetchall()
        )
        for key, opened, openings in conn.execute(_OPENINGS).fetchall():
            if opened != 1:
                out.append(f"case {key} opened {opened} times")
            if announced.get(key, 0) != openings:
                out.append(f"case {key}: {announced.get(key, 0)} CaseOpened for {openings} openings")
    return out


_OPENINGS = """SELECT c.case_key, count(*) FILTER (WHERE h.action = 'opened'),
    count(*) FILTER (WHERE h.action IN ('opened', 'reopened'))
  FROM cases c JOIN case_history h ON h.case_id = c.id GROUP BY c.case_key"""
_RUN_LOCKS = """SELECT pid, objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
