"""Fault rules of the control API and their matching: which call or webhook a fault hits.

A rule has a kind, a scope and a budget:
- scope: ``operation`` (create, confirm, capture, cancel, refund, complete_action, payout, retrieve;
  webhook rules also dispute, refund_complete, payout_settle and payout_return), ``reference`` (our
  reference on the intent, the refund or the payout),
  ``event_type`` (webhook rules); an unset field matches everything;
- budget: ``count`` = how many matching calls (or webhook events) it hits, then it is spent; unset means
  until cleared. For ``webhook_reorder`` the budget counts groups.
Rules are tried oldest first; a call takes at most one request rule, a webhook event at most one rule of
each webhook kind (duplicate + wrong signature compose). Rules live in memory and in the database: every
change (a rule added, removed, or spending its budget) bumps ``version``, and the service saves the book
with the change (``snapshot``; an older snapshot never overwrites a newer one), so a simulator restarted
in the middle of a drill keeps the faults it was asked for, with what they already spent.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final, Literal, cast, get_args

from psp_sim.domain.webhooks import EXPIRED_AGE_S_DEFAULT, DeliveryPlan

RequestFaultKind = Literal[
    "apply_then_fail",
    "apply_then_hang",
    "fail_without_apply",
    "hang_without_apply",
    "webhook_before_response",
    "refund_pending",
    "payout_refuse",
    "payout_fail",
]
WebhookFaultKind = Literal[
    "webhook_duplicate",
    "webhook_delay",
    "webhook_drop",
    "webhook_reorder",
    "webhook_wrong_secret",
    "webhook_expired_signature",
]
FaultKind = RequestFaultKind | WebhookFaultKind
Operation = Literal[
    "create",
    "confirm",
    "capture",
    "cancel",
    "refund",
    "complete_action",
    "payout",
    "retrieve",
    "dispute",
    "refund_complete",
    "payout_settle",
    "payout_return",
]
REQUEST_KINDS: Final = frozenset(get_args(RequestFaultKind))
WEBHOOK_KINDS: Final = frozenset(get_args(WebhookFaultKind))
OPERATIONS: Final = frozenset(get_args(Operation))
# Kinds that shape the effect of an accepted write instead of the call (taken by the use case).
EFFECT_KINDS: Final = frozenset({"refund_pending", "payout_refuse", "payout_fail"})
# The kinds that decide what happens to the call itself (at most one per call).
CALL_KINDS: Final = frozenset(REQUEST_KINDS - EFFECT_KINDS)
FAILURE_CODE_DEFAULT: Final = "card_declined"
RULES_MAX: Final = 1000
HANG_MS_MAX: Final = 600_000
DELAY_MS_MAX: Final = 3_600_000
COPIES_MAX: Final = 20
GROUP_SIZE_MAX: Final = 100
_CODE: Final = re.compile(r"[a-z0-9_]{1,64}")


class FaultRuleError(ValueError):
    """A fault rule from the control API is malformed; the message names the field."""


@dataclass(slots=True)
class FaultRule:
    id: str
    kind: FaultKind
    remaining: int | None
    operation: Operation | None = None
    reference: str | None = None
    event_type: str | None = None
    status: int = 500
    hang_ms: int = 30_000
    copies: int = 1
    delay_ms: int = 0
    group_size: int = 2
    age_s: int = EXPIRED_AGE_S_DEFAULT
    code: str = FAILURE_CODE_DEFAULT  # payout_refuse / payout_fail: the failure code to answer with
    hits: int = 0
    held: int = 0
    group_no: int = 0

    def matches(self, operation: str, references: Iterable[str], event_type: str | None) -> bool:
        if self.remaining == 0:
            return False
        if self.operation is not None and self.operation != operation:
            return False
        if self.reference is not None and self.reference not in references:
            return False
        return self.event_type is None or self.event_type == event_type

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "remaining": self.remaining,
            "operation": self.operation,
            "reference": self.reference,
            "event_type": self.event_type,
            "status": self.status,
            "hang_ms": self.hang_ms,
            "copies": self.copies,
            "delay_ms": self.delay_ms,
            "group_size": self.group_size,
            "age_s": self.age_s,
            "code": self.code,
            "hits": self.hits,
            "held": self.held,
        }


@dataclass(frozen=True, slots=True)
class WebhookDecision:
    plan: DeliveryPlan
    release_group: str | None  # a reorder group just filled up: release it (reversed) now


@dataclass
class FaultBook:
    """The active rules; single-threaded use from the event loop (no awaits inside a method)."""

    rules: list[FaultRule] = field(default_factory=list)
    version: int = 0  # bumped by every change: what to save, and which saved book is the latest
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(self, spec: dict[str, Any]) -> FaultRule:
        if len(self.rules) >= RULES_MAX:
            raise FaultRuleError(f"at most {RULES_MAX} fault rules")
        rule = parse_rule(f"flt_{next(self._ids)}", spec)
        self.rules.append(rule)
        self.version += 1
        return rule

    def remove(self, rule_id: str) -> bool:
        kept = [r for r in self.rules if r.id != rule_id]
        if len(kept) == len(self.rules):
            return False  # a refusal changes nothing: no new version for the next write to save
        self.rules = kept
        self.version += 1
        return True

    def clear(self) -> None:
        self.rules = []
        self.version += 1

    def snapshot(self) -> dict[str, Any]:
        next_id = next(self._ids)
        self._ids = itertools.count(next_id)
        return {"version": self.version, "next_id": next_id, "rules": [asdict(rule) for rule in self.rules]}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Rebuild from a ``snapshot`` this class wrote; a rule of a kind this simulator does not
        know is refused (it could not fire it)."""
        known = {f.name for f in fields(FaultRule)}
        rules = []
        for stored in snapshot["rules"]:
            if stored.get("kind") not in REQUEST_KINDS | WEBHOOK_KINDS or set(stored) - known:
                raise FaultRuleError("a stored fault rule this simulator does not know")
            rules.append(FaultRule(**stored))
        self.rules, self.version = rules, int(snapshot["version"])
        self._ids = itertools.count(int(snapshot["next_id"]))

    def has_any(self, kinds: frozenset[str]) -> bool:
        """Whether a rule of ``kinds`` with budget left is armed."""
        return any(r.kind in kinds and r.remaining != 0 for r in self.rules)

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def take(self, kinds: frozenset[str], operation: str, references: Iterable[str]) -> FaultRule | None:
        """The oldest matching rule among ``kinds``, its budget spent by one."""
        if not self.rules:
            return None
        refs = tuple(references)
        for rule in self.rules:
            if rule.kind in kinds and rule.matches(operation, refs, None):
                _spend(rule)
                self.version += 1
                return rule
        return None

    def plan_webhook(self, event_type: str, operation: str, references: Iterable[str]) -> WebhookDecision:
        """How a new event is queued, given the webhook rules that match it."""
        plan, release = DeliveryPlan(), None
        if not self.rules:
            return WebhookDecision(plan, None)
        refs = tuple(references)
        for kind in sorted(WEBHOOK_KINDS):
            rule = next(
                (r for r in self.rules if r.kind == kind and r.matches(operation, refs, event_type)), None
            )
            if rule is not None:
                plan, filled = _fold(plan, rule)
                release = release or filled
                self.version += 1
        return WebhookDecision(plan, release)


def _spend(rule: FaultRule) -> None:
    rule.hits += 1
    if rule.remaining is not None:
        rule.remaining -= 1


def _fold(plan: DeliveryPlan, rule: FaultRule) -> tuple[DeliveryPlan, str | None]:
    if rule.kind == "webhook_reorder":
        rule.hits += 1
        rule.held += 1
        group = f"{rule.id}.{rule.group_no}"
        if rule.held < rule.group_size:
            return replace(plan, hold_group=group), None
        rule.held, rule.group_no = 0, rule.group_no + 1
        if rule.remaining is not None:
            rule.remaining -= 1
        return replace(plan, hold_group=group), group
    _spend(rule)
    by_kind: dict[str, dict[str, Any]] = {
        "webhook_duplicate": {"copies": 1 + rule.copies},
        "webhook_delay": {"delay_ms": rule.delay_ms},
        "webhook_drop": {"dropped": True},
        "webhook_wrong_secret": {"signing": "wrong_secret"},
        "webhook_expired_signature": {"signing": "expired", "signing_age_s": rule.age_s},
    }
    return replace(plan, **by_kind[rule.kind]), None


def _int(spec: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = spec.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise FaultRuleError(f"{name} must be an integer {low}..{high}")
    return value


def _optional_text(spec: dict[str, Any], name: str) -> str | None:
    value = spec.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise FaultRuleError(f"{name} must be a non-empty string")
    return value


_FIELDS: Final = frozenset(
    {
        "kind",
        "count",
        "operation",
        "reference",
        "event_type",
        "status",
        "hang_ms",
        "copies",
        "delay_ms",
        "group_size",
        "age_s",
        "code",
    }
)


def parse_rule(rule_id: str, spec: dict[str, Any]) -> FaultRule:
    unknown = set(spec) - _FIELDS
    if unknown:
        raise FaultRuleError(f"unknown fields: {sorted(unknown)}")
    kind = spec.get("kind")
    if kind not in REQUEST_KINDS | WEBHOOK_KINDS:
        raise FaultRuleError(f"kind must be one of {sorted(REQUEST_KINDS | WEBHOOK_KINDS)}")
    operation = _optional_text(spec, "operation")
    if operation is not None and operation not in OPERATIONS:
        raise FaultRuleError(f"operation must be one of {sorted(OPERATIONS)}")
    count = spec.get("count")
    if count is not None and (type(count) is not int or not 1 <= count <= 1_000_000):
        raise FaultRuleError("count must be an integer 1..1000000 (omit it for 'until cleared')")
    return FaultRule(
        id=rule_id,
        kind=cast(FaultKind, kind),
        remaining=count,
        operation=cast(Operation | None, operation),
        reference=_optional_text(spec, "reference"),
        event_type=_optional_text(spec, "event_type"),
        status=_int(spec, "status", 503 if kind == "fail_without_apply" else 500, 500, 599),
        hang_ms=_int(spec, "hang_ms", 30_000, 1, HANG_MS_MAX),
        copies=_int(spec, "copies", 1, 1, COPIES_MAX),
        delay_ms=_int(spec, "delay_ms", 5000, 1, DELAY_MS_MAX),
        group_size=_int(spec, "group_size", 2, 2, GROUP_SIZE_MAX),
        age_s=_int(spec, "age_s", EXPIRED_AGE_S_DEFAULT, 301, 10 * 365 * 86_400),
        code=_code(spec),
    )


def _code(spec: dict[str, Any]) -> str:
    value = spec.get("code", FAILURE_CODE_DEFAULT)
    if not isinstance(value, str) or _CODE.fullmatch(value) is None:
        raise FaultRuleError("code must be 1..64 characters of a-z, 0-9 and _")
    return value
