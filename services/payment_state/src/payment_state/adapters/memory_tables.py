"""The in-memory store's tables: the rows as the database keeps them (with the columns the domain's
entities do not carry), and the unique-index refusal (``adapters.memory_store`` is the store)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from payment_state.domain.commands import StoredResponse
from payment_state.domain.model import Operation, OperationStatus, Payment
from payment_state.domain.payouts import PayoutState
from payment_state.domain.repairs import RepairRequest

OPEN: Final = frozenset({OperationStatus.PENDING, OperationStatus.UNKNOWN})
SOURCES: Final = frozenset({"response", "webhook", "lookup"})
OUTCOMES: Final = frozenset({"applied", "stale", "duplicate", "pending", "conflict", "unmatched", "ignored"})
KINDS: Final = frozenset({"create", "capture", "cancel", "refund"})


class UniqueViolation(Exception):
    """A write the database's unique index would refuse (raised, as psycopg raises its own)."""


@dataclass
class OperationRow:
    """An operation with the executor's bookkeeping columns (which ``Operation`` does not carry)."""

    op: Operation
    seq: int  # creation order: one operation per transaction, so the database's created_at order
    next_attempt_at_ms: int
    claimed_by: str | None = None
    claimed_until_ms: int | None = None
    unknown_since_ms: int | None = None
    resolved_at_ms: int | None = None


@dataclass
class RepairRow:
    """A repair request with its status and the worker's bookkeeping (``repair_requests``)."""

    request: RepairRequest
    next_attempt_at_ms: int
    status: str = "requested"
    detail: str | None = None
    reference: str | None = None
    attempts: int = 0
    claimed_by: str | None = None
    claimed_until_ms: int | None = None


@dataclass
class KeyRow:
    stored: StoredResponse
    created_at_ms: int


@dataclass(frozen=True)
class FactRow:
    provider: str
    provider_event_id: str | None
    source: str
    fact_type: str
    payment_id: str | None
    operation_id: str | None
    outcome: str
    detail: str | None
    causation_id: str | None


@dataclass
class PayoutRow:
    """A payout with its operation's claim (which ``PayoutOperation`` does not carry)."""

    state: PayoutState
    seq: int
    next_attempt_at_ms: int
    claimed_by: str | None = None
    claimed_until_ms: int | None = None
    unknown_since_ms: int | None = None


@dataclass
class Tables:
    payments: dict[str, Payment] = field(default_factory=dict)
    operations: dict[str, OperationRow] = field(default_factory=dict)
    keys: dict[tuple[str, str, str], KeyRow] = field(default_factory=dict)
    facts: list[FactRow] = field(default_factory=list)
    # chargeback id -> (payment id, provider, provider dispute id)
    chargebacks: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # (payment id, operation id or '', kind) -> detail
    cases: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # repair id -> the request and where it stands
    repairs: dict[int, RepairRow] = field(default_factory=dict)
    # withdrawal id -> its payout, operation and the operation's claim (``memory_payouts.PayoutRow``)
    payouts: dict[str, PayoutRow] = field(default_factory=dict)
    # (payment id, event type, body, causation id): the outbox, payment events and repair outcomes
    events: list[tuple[str, str, dict[str, Any], str | None]] = field(default_factory=list)


def as_json(body: dict[str, Any]) -> dict[str, Any]:
    """What a jsonb column gives back."""
    parsed: dict[str, Any] = json.loads(json.dumps(body))
    return parsed
