"""A seeded schedule of faults for a drill; ``injector`` plays it on a running system.

``plan(seed, duration_s)`` is a pure function: the same seed gives the same schedule (printed with
every drill, saved with a failing one, replayed by a regression test from its JSON). Faults with a
duration (a SIGSTOP, a process down, a broker down, a clock offset) carry it in their parameters.

Every schedule has at least one ``recon_kill``: the reconciler's daily run of today, killed in the
middle (at one of its steps, by a failpoint, or from outside after a moment) and run again.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

CONSUMERS: Final = ("payment_state-consume", "mt5_credit-consume", "ledger-consume", "reconciler-consume")
MT5_SIM: Final = "mt5_sim"
PSP_CALL_KINDS: Final = ("apply_then_fail", "apply_then_hang", "fail_without_apply", "hang_without_apply")
PSP_OPERATIONS: Final = ("create", "confirm", "capture", "refund", "retrieve", "payout")
PSP_WEBHOOK_KINDS: Final = (
    "webhook_drop",
    "webhook_duplicate",
    "webhook_delay",
    "webhook_reorder",
    "webhook_wrong_secret",
    "webhook_expired_signature",
)
MT5_KINDS: Final = (
    "drop_after_apply",
    "hang_before_apply",
    "hang_after_apply",
    "slow",
    "disconnect",
    "throttle",
    "garbage",
    "cross_account",
)
# kind -> weight in the random schedule
WEIGHTS: Final = {
    "kill": 4,
    "pause": 3,
    "zombie": 1,
    "kafka_restart": 1,
    "pg_crash": 1,
    "psp_call": 3,
    "psp_webhook": 3,
    "mt5_fault": 3,
    "mt5_disconnect_all": 1,
    "secret_rotation": 1,
    "clock_offset": 1,
    "recon_kill": 1,
}
# where a killed reconciliation run dies: after one of its steps (failpoints reconciler.run.<step>;
# cases_written: inside the transaction that writes the cases), or "timer": SIGKILL from outside
RECON_STEPS: Final = ("started", "imported", "deals_read", "matched", "cases_written", "timer")
ZOMBIE_PAUSE_S: Final = 14.0  # past the consumers' session timeout (10 s): the group moves on


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the schedule starts
    kind: str
    target: str = ""
    params: dict[str, Any] = field(default_factory=dict)


def plan(seed: int, duration_s: float, processes: list[str]) -> list[Fault]:
    """The schedule of ``seed``: a fault every 2-6 s over ``duration_s`` among ``processes``."""
    rng = random.Random(seed)
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] for k in kinds]
    faults: list[Fault] = []
    at = rng.uniform(1.0, 4.0)
    rotated = False
    while at < duration_s:
        kind = rng.choices(kinds, weights)[0]
        if kind == "secret_rotation" and rotated:
            kind = "kill"
        faults.append(_one(rng, kind, at, processes))
        rotated = rotated or kind == "secret_rotation"
        at += rng.uniform(2.0, 6.0)
    if faults and not any(f.kind == "recon_kill" for f in faults):
        at = rng.uniform(duration_s * 0.25, duration_s * 0.75)
        faults.append(_one(rng, "recon_kill", at, processes))
        faults.sort(key=lambda f: f.at)
    return faults


def _one(rng: random.Random, kind: str, at: float, processes: list[str]) -> Fault:  # noqa: PLR0911, PLR0912 - one branch per kind
    at = round(at, 2)
    if kind == "kill":
        return Fault(at, kind, rng.choice(processes), {"down_s": round(rng.uniform(0.2, 3.0), 2)})
    if kind == "pause":
        return Fault(at, kind, rng.choice(processes), {"pause_s": round(rng.uniform(1.0, 6.0), 2)})
    if kind == "zombie":
        return Fault(at, kind, rng.choice(CONSUMERS), {"pause_s": ZOMBIE_PAUSE_S})
    if kind == "kafka_restart":
        mode = rng.choice(["graceful", "kill"])
        return Fault(at, kind, "kafka", {"mode": mode, "down_s": round(rng.uniform(1.0, 4.0), 2)})
    if kind == "pg_crash":
        return Fault(at, kind, "postgresql", {"down_s": round(rng.uniform(0.5, 3.0), 2)})
    if kind == "psp_call":
        rule = {
            "kind": rng.choice(PSP_CALL_KINDS),
            "operation": rng.choice(PSP_OPERATIONS),
            "count": rng.randint(1, 2),
            "hang_ms": rng.choice([2500, 4000]),
        }
        return Fault(at, kind, "psp_sim", rule)
    if kind == "psp_webhook":
        rule = {"kind": rng.choice(PSP_WEBHOOK_KINDS), "count": rng.randint(1, 3)}
        if rule["kind"] == "webhook_duplicate":
            rule["copies"] = rng.randint(2, 4)
        if rule["kind"] == "webhook_delay":
            rule["delay_ms"] = rng.choice([1000, 3000, 6000])
        return Fault(at, kind, "psp_sim", rule)
    if kind == "mt5_fault":
        spec: dict[str, Any] = {"kind": rng.choice(MT5_KINDS), "count": rng.randint(1, 2)}
        if spec["kind"] in ("hang_before_apply", "hang_after_apply", "slow"):
            spec["delay_ms"] = rng.choice([1500, 3000])
        if spec["kind"] != "disconnect":
            spec["endpoint"] = "trade/balance"
        return Fault(at, kind, MT5_SIM, spec)
    if kind == "mt5_disconnect_all":
        return Fault(at, kind, MT5_SIM)
    if kind == "secret_rotation":
        return Fault(at, kind, "psp_sim+gateway-api", {"secret": f"whsec_drill_{rng.getrandbits(64):016x}"})
    if kind == "clock_offset":
        offset = rng.choice([-1, 1]) * rng.randint(5, 90)
        return Fault(at, kind, MT5_SIM, {"offset_s": offset, "hold_s": round(rng.uniform(5.0, 15.0), 2)})
    if kind == "recon_kill":
        params: dict[str, Any] = {
            "step": rng.choice(RECON_STEPS),
            "rerun_after_s": round(rng.uniform(0.0, 5.0), 2),
        }
        if params["step"] == "timer":
            params["after_s"] = round(rng.uniform(0.0, 1.0), 2)  # after the run's start
        return Fault(at, kind, "reconciler-run", params)
    raise ValueError(f"unknown fault kind {kind!r}")


def save(faults: list[Fault], path: Path) -> None:
    path.write_text(json.dumps([asdict(f) for f in faults], indent=1) + "\n")


def load(path: Path) -> list[Fault]:
    return [Fault(**f) for f in json.loads(path.read_text())]


def new_secret() -> str:
    return f"whsec_drill_{uuid.uuid4().hex}"
