"""The tables of the in-memory credit store (``memory_store``): the rows as the rules need them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mt5_credit.domain.intake import Account, DepositIntent
from mt5_credit.domain.model import CreditRow
from mt5_credit.domain.repairs import RepairRef
from mt5_credit.domain.withdrawals import Withdrawal

REASON_CHARS_MAX = 500


class UniqueViolation(Exception):
    """A write the database's unique index would refuse (raised, as psycopg raises its own)."""


@dataclass
class Stored:
    """A row with the columns the application never reads but the rules need."""

    row: CreditRow
    source_key: str
    fx_source: str | None = None
    fx_taken_at_ms: int | None = None
    lease_expires_at_ms: int | None = None
    unknown_since_ms: int | None = None
    next_lookup_at_ms: int | None = None
    needs_person: bool = False
    repair: RepairRef | None = None
    lookups: int = 0
    last_retcode: str | None = None
    last_reason: str | None = None
    payment_method_token: str | None = None


@dataclass
class Tables:
    accounts: dict[int, Account] = field(default_factory=dict)
    intents: dict[str, DepositIntent] = field(default_factory=dict)
    intent_keys: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # -> (ref, digest)
    rows: dict[int, Stored] = field(default_factory=dict)
    transitions: list[tuple[int, str | None, str, str]] = field(default_factory=list)
    cases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (key, type, body)
    withdrawals: dict[str, Withdrawal] = field(default_factory=dict)
    withdrawal_audit: list[tuple[str, str, str]] = field(default_factory=list)  # (id, action, reason)
