"""The injector that plays a drill's fault schedule (``faults``) on a running system.

It plays the schedule in time order; faults with a duration (a SIGSTOP, a process down, a broker
down, a clock offset) end on their own timers, so they overlap as they would in life. It also runs
the drill's supervisor: a process that dies without being told to is started again at once (and
the death is noted), as the product's own supervisor would.

A ``recon_kill`` starts the reconciler's daily run of today as the scheduler would, SIGKILLs it in
the middle (at one of its steps, by a failpoint, or from outside after a moment), then runs it
again the way a scheduler retries: while the date's lock is held (exit 4) it tries again every
second, and how long it waited is kept on the fault for the checker.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from backbone.mt5.testing import ControlError
from backbone.testing.drill.faults import MT5_SIM, Fault
from backbone.testing.drill.history import History
from backbone.testing.drill.infra import InfraError, PrivateInfra
from backbone.testing.system import System

RECON_RUN_TIMEOUT_S: Final = 300.0
RECON_LOCK_WAIT_S: Final = 30.0  # a re-run still refused after this long: the dead run kept the lock
RECON_BUSY_EXIT: Final = 4  # python -m reconciler run: another run of the date holds the lock


class Injector:
    """Plays a schedule on ``system`` (and the private ``infra``), recording each fault in ``history``."""

    def __init__(self, system: System, infra: PrivateInfra, history: History) -> None:
        self.system, self.infra, self.history = system, infra, history
        self._lock = threading.RLock()
        self._down: set[str] = set()  # processes killed on purpose, waiting for their restart
        self._paused: set[str] = set()
        self._timers: list[threading.Timer] = []
        self._stop = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="drill-supervisor", daemon=True)

    # --- playing ------------------------------------------------------------------------------

    def play(self, faults: list[Fault], start: float) -> None:
        """Block until every fault of the schedule has been started (``start``: monotonic t0)."""
        self._supervisor.start()
        for fault in faults:
            wait = start + fault.at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                self._apply(fault)
            except Exception as error:
                self.history.note(f"fault {fault.kind} on {fault.target} not applied: {error!r}")

    def _later(self, seconds: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, self._guarded, (action,))
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:
            self.history.note(f"ending a fault failed: {error!r}")

    def _apply(self, fault: Fault) -> None:  # noqa: PLR0912 - one branch per kind
        kind, target, p = fault.kind, fault.target, fault.params
        entry = self.history.fault(kind, target, p)
        if kind == "kill":
            with self._lock:
                if target in self._down:
                    return
                self._down.add(target)
                self._cont(target)
            self._kill(target)
            self._later(p["down_s"], lambda: self._revive(target, entry))
        elif kind in ("pause", "zombie"):
            with self._lock:
                if target in self._down or target in self._paused:
                    return
                self._paused.add(target)
            self._signal(target, signal.SIGSTOP)
            self._later(p["pause_s"], lambda: self._resume(target, entry))
        elif kind == "kafka_restart":
            # in its own thread: a broker takes tens of seconds to start, the schedule goes on
            self._later(0, lambda: self._restart_broker(p, entry))
        elif kind == "pg_crash":
            self._later(0, lambda: self._restart_postgres(p, entry))
        elif kind in ("psp_call", "psp_webhook"):
            status, body = self.system.http("POST", f"{self.system.urls.psp_control}/control/faults", p)
            if status not in (200, 201):
                raise RuntimeError(f"PSP refused the fault {p}: {status} {body}")
        elif kind == "mt5_fault":
            assert self.system.mt5 is not None
            self.system.mt5.control.arm_fault(**p)
        elif kind == "mt5_disconnect_all":
            assert self.system.mt5 is not None
            self.system.mt5.control.disconnect()
        elif kind == "secret_rotation":
            self._rotate(p["secret"], entry)
        elif kind == "clock_offset":
            assert self.system.mt5 is not None
            self.system.mt5.control.set_clock_offset(p["offset_s"])
            self._later(p["hold_s"], lambda: self._clock_back(entry))
        elif kind == "recon_kill":
            self._later(0, lambda: self._kill_reconciliation(p, entry))
        else:
            raise ValueError(kind)

    def _restart_broker(self, p: dict[str, Any], entry: Any) -> None:
        if p["mode"] == "kill":
            self.infra.kill_broker()
        else:
            self.infra.kafka("stop")
        time.sleep(p["down_s"])
        self.infra.kafka("start")
        entry.ended = self.history.now()

    def _restart_postgres(self, p: dict[str, Any], entry: Any) -> None:
        self.infra.crash_postgres()
        time.sleep(p["down_s"])
        self.infra.pg("start")
        entry.ended = self.history.now()

    def _rotate(self, secret: str, entry: Any) -> None:
        """As an operator rotates: the gateway learns the new secret first (keeping the old one),
        then the PSP signs with the new one."""
        old = self.system.envs["gateway-api"].get("SIMPSP_WEBHOOK_SECRET", "")
        with self._lock:
            self._down.add("gateway-api")
        try:
            self.system.envs["gateway-api"] = {
                **self.system.envs["gateway-api"],
                "SIMPSP_WEBHOOK_SECRET": secret,
                "SIMPSP_WEBHOOK_SECRET_PREVIOUS": old,
            }
            self.system.restart("gateway-api")
        finally:
            with self._lock:
                self._down.discard("gateway-api")
        status, body = self.system.http(
            "POST",
            f"{self.system.urls.psp_control}/control/webhook-secrets/rotate",
            {"secret": secret, "keep_previous": True},
        )
        if status != 200:
            raise RuntimeError(f"PSP refused the rotation: {status} {body}")
        entry.ended = self.history.now()

    def _kill_reconciliation(self, p: dict[str, Any], entry: Any) -> None:
        """Today's run killed mid-run, then run again as a scheduler retries (see the module doc).
        ``entry.detail`` gets the killed run's exit status, the re-run's, and the seconds the re-run
        waited for the date's lock."""
        day = dt.datetime.now(dt.UTC).date().isoformat()
        env = self.system.reconciler_env()
        if p["step"] != "timer":
            env["BACKBONE_FAILPOINTS"] = f"reconciler.run.{p['step']}=kill"
        log = self.system.workdir / f"reconciler-run-{entry.at:07.2f}.log"
        command = [sys.executable, "-m", "reconciler", "run", "--date", day, "--json"]
        with log.open("ab") as out:
            run = subprocess.Popen(command, env=env, stdout=out, stderr=out)
            if p["step"] == "timer":  # SIGKILL from outside, a moment after the run has begun
                _wait_for(log, b"reconciler.run_started", run, RECON_RUN_TIMEOUT_S)
                time.sleep(p["after_s"])
                run.kill()
            code = run.wait(RECON_RUN_TIMEOUT_S)
        entry.detail["killed_exit"] = code
        if code != -signal.SIGKILL:
            self.history.note(f"reconciliation run ({p['step']}) ended by itself (exit {code}), not killed")
        time.sleep(p["rerun_after_s"])
        env.pop("BACKBONE_FAILPOINTS", None)
        started = time.monotonic()
        while True:
            with log.open("ab") as out:
                done = subprocess.run(
                    command,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=out,
                    timeout=RECON_RUN_TIMEOUT_S,
                    check=False,
                )
            waited = time.monotonic() - started
            if done.returncode != RECON_BUSY_EXIT or waited > RECON_LOCK_WAIT_S:
                break
            time.sleep(1.0)
        entry.detail["rerun_exit"] = done.returncode
        entry.detail["lock_wait_s"] = round(waited, 1)
        with contextlib.suppress(ValueError):
            entry.detail["rerun_status"] = json.loads(done.stdout)["status"]
        entry.ended = self.history.now()

    def _clock_back(self, entry: Any) -> None:
        assert self.system.mt5 is not None
        self.system.mt5.control.set_clock_offset(0)
        entry.ended = self.history.now()

    # --- processes ----------------------------------------------------------------------------

    def _pid(self, name: str) -> int | None:
        if name == MT5_SIM:
            mt5 = self.system.mt5
            return mt5.proc.popen.pid if mt5 is not None and mt5.proc is not None else None
        return self.system.procs[name].popen.pid

    def _signal(self, name: str, sig: signal.Signals) -> None:
        pid = self._pid(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _cont(self, name: str) -> None:
        if name in self._paused:
            self._signal(name, signal.SIGCONT)
            self._paused.discard(name)

    def _kill(self, name: str) -> None:
        if name == MT5_SIM:
            assert self.system.mt5 is not None
            self.system.mt5.kill()
        else:
            self.system.procs[name].kill()

    def _start(self, name: str) -> None:
        if name == MT5_SIM:
            assert self.system.mt5 is not None
            self.system.mt5.start()
        else:
            self.system.restart(name)

    def _revive(self, name: str, entry: Any) -> None:
        with self._lock:
            try:
                self._start(name)
            finally:
                self._down.discard(name)
        entry.ended = self.history.now()

    def _resume(self, name: str, entry: Any) -> None:
        with self._lock:
            if name in self._paused:
                self._signal(name, signal.SIGCONT)
                self._paused.discard(name)
        entry.ended = self.history.now()

    def _dead(self) -> list[str]:
        names = [n for n, p in self.system.procs.items() if p.popen.poll() is not None]
        mt5 = self.system.mt5
        if mt5 is not None and mt5.proc is not None and mt5.proc.popen.poll() is not None:
            names.append(MT5_SIM)
        return names

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name in self._dead():
                    if name in self._down:
                        continue
                    code = self.system.procs[name].popen.returncode if name != MT5_SIM else "?"
                    self.history.note(f"{name} died unprompted (exit {code}); started again")
                    try:
                        self._start(name)
                    except Exception as error:
                        self.history.note(f"{name} could not be started again: {error!r}")

    # --- the end of the faults ----------------------------------------------------------------

    def calm(self, timeout_s: float = 240.0) -> None:
        """End every fault: timers run now, paused processes continue, the dead start again, the
        simulators' fault books are cleared, the clock is right, Kafka and PostgreSQL answer."""
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.join(timeout_s)
        with self._lock:
            for name in list(self._paused):
                self._signal(name, signal.SIGCONT)
            self._paused.clear()
        for _ in range(3):
            try:
                self.infra.kafka("status")
                break
            except InfraError:
                self.infra.kafka("start")
        try:
            self.infra.pg("status")
        except InfraError:
            self.infra.pg("start")
        assert self.system.mt5 is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the simulators may be restarting
            try:
                self.system.mt5.control.clear_faults()
                self.system.mt5.control.set_clock_offset(0)
                status, _ = self.system.http("DELETE", f"{self.system.urls.psp_control}/control/faults")
                if status == 200:
                    break
            except (OSError, ControlError):
                pass
            time.sleep(0.5)
        self.history.note("faults over")

    def stop(self) -> None:
        self._stop.set()
        if self._supervisor.is_alive():
            self._supervisor.join(10)


def _wait_for(log: Path, marker: bytes, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until ``marker`` is in ``log`` (or the process ended, or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and marker not in log.read_bytes():
        time.sleep(0.02)
