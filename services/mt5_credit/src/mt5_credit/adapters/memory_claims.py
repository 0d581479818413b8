"""The claim-to-outcome rules of the in-memory credit store (``InMemoryCreditStore``'s base class),
the twin of ``postgres_claims``: a claim only from ``pending``, an outcome only under this claim's
token, a lease that expires into ``unknown``."""

from __future__ import annotations

import uuid
from dataclasses import replace

from backbone.invariants import invariant

from mt5_credit.adapters.memory_tables import REASON_CHARS_MAX, Tables
from mt5_credit.domain.model import CreditKind, CreditRow, CreditStatus, can_move


class MemoryCreditClaims:
    """Claims, outcomes and lookups on the store's tables and clock."""

    _t: Tables
    _now_ms: int

    def expire_leases(self, limit: int) -> list[CreditRow]:
        now = self._now_ms
        expired = sorted(
            (s for s in self._t.rows.values()
             if s.row.status is CreditStatus.CLAIMED and (s.lease_expires_at_ms or 0) < now),
            key=lambda s: s.lease_expires_at_ms or 0,
        )[:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for s in expired:
            s.row = replace(s.row, status=CreditStatus.UNKNOWN, silent_lookups=0)
            s.unknown_since_ms, s.next_lookup_at_ms, s.last_reason = now, now, "lease expired"
            self._log(s.row.id, CreditStatus.CLAIMED, CreditStatus.UNKNOWN, "lease expired")
        return [s.row for s in expired]

    def claim(self, limit: int, lease_ms: int) -> list[CreditRow]:
        now = self._now_ms
        ready = [
            s for s in sorted(self._t.rows.values(), key=lambda s: s.row.id)
            if s.row.status is CreditStatus.PENDING and self._original_done(s.row)
        ][:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for s in ready:
            s.row = replace(
                s.row, status=CreditStatus.CLAIMED, claimed_at_ms=now,
                first_claimed_at_ms=now if s.row.first_claimed_at_ms is None else s.row.first_claimed_at_ms,
                claim_token=str(uuid.uuid4()), attempts=s.row.attempts + 1,
            )  # fmt: skip  # packed: a few items a line read better than one each
            s.lease_expires_at_ms = now + lease_ms
            self._log(s.row.id, CreditStatus.PENDING, CreditStatus.CLAIMED, f"claim #{s.row.attempts}")
        return [s.row for s in ready]

    def _original_done(self, row: CreditRow) -> bool:
        if row.kind is CreditKind.CREDIT or row.original_credit_id is None:
            return True
        original = self._t.rows.get(row.original_credit_id or 0)
        return original is not None and original.row.status is CreditStatus.DONE

    def arm(self, row: CreditRow, lease_ms: int) -> CreditRow | None:
        s = self._t.rows.get(row.id)
        now = self._now_ms
        if s is None or s.row.claim_token != row.claim_token or s.row.status is not CreditStatus.CLAIMED:
            return None
        if (s.lease_expires_at_ms or 0) <= now:
            return None
        s.row = replace(s.row, claimed_at_ms=now)
        s.lease_expires_at_ms = now + lease_ms
        return s.row

    def finish(
        self,
        row: CreditRow,
        to: CreditStatus,
        reason: str,
        *,
        ticket: int | None = None,
        retcode: str | None = None,
        call_started_ago_ms: int | None = None,
    ) -> bool:
        invariant(can_move(row.status, to), f"credit {row.id}: {row.status} -> {to} is not a transition")
        allowed = (
            {CreditStatus.CLAIMED}
            if to is CreditStatus.UNKNOWN
            else {CreditStatus.CLAIMED, CreditStatus.UNKNOWN}
        )
        s = self._t.rows.get(row.id)
        if s is None or s.row.claim_token != row.claim_token or s.row.status not in allowed:
            return False
        now, before = self._now_ms, s.row.status
        s.row = replace(
            s.row, status=to,
            mt5_deal_ticket=ticket if ticket is not None else s.row.mt5_deal_ticket,
            claimed_at_ms=s.row.claimed_at_ms if call_started_ago_ms is None else now - call_started_ago_ms,
            silent_lookups=0,
        )  # fmt: skip  # packed: a few items a line read better than one each
        s.last_retcode = retcode if retcode is not None else s.last_retcode
        s.last_reason, s.lease_expires_at_ms = reason[:REASON_CHARS_MAX], None
        if to is CreditStatus.UNKNOWN:
            s.unknown_since_ms = s.next_lookup_at_ms = now
        self._log(row.id, before, to, reason)
        return True

    def due_unknown(self, limit: int, dead_after_ms: int, hold_ms: int) -> list[CreditRow]:
        now = self._now_ms
        due = sorted(
            (s for s in self._t.rows.values()
             if s.row.status is CreditStatus.UNKNOWN and not s.needs_person
             and (s.next_lookup_at_ms or 0) <= now and (s.row.claimed_at_ms or 0) + dead_after_ms <= now),
            key=lambda s: s.next_lookup_at_ms or 0,
        )[:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for s in due:
            s.next_lookup_at_ms, s.lookups = now + hold_ms, s.lookups + 1
        return [s.row for s in due]

    def resolve(
        self,
        row: CreditRow,
        to: CreditStatus,
        reason: str,
        *,
        ticket: int | None = None,
        needs_person: bool = False,
        no_answer: bool = False,
        next_lookup_ms: int = 0,
    ) -> bool:
        invariant(
            to is CreditStatus.UNKNOWN or can_move(row.status, to), f"credit {row.id}: {row.status} -> {to}"
        )
        s = self._t.rows.get(row.id)
        if s is None or s.row.status is not CreditStatus.UNKNOWN or s.row.claim_token != row.claim_token:
            return False
        s.row = replace(
            s.row, status=to,
            mt5_deal_ticket=ticket if ticket is not None else s.row.mt5_deal_ticket,
            silent_lookups=s.row.silent_lookups + 1 if no_answer else 0,
            claim_token=None if to is CreditStatus.PENDING else s.row.claim_token,
        )  # fmt: skip  # packed: a few items a line read better than one each
        s.needs_person = s.needs_person or needs_person
        s.last_reason, s.next_lookup_at_ms = reason[:REASON_CHARS_MAX], self._now_ms + next_lookup_ms
        if to is not CreditStatus.UNKNOWN:
            self._log(row.id, CreditStatus.UNKNOWN, to, reason)
        return True

    def load_row(self, credit_id: int) -> CreditRow | None:
        s = self._t.rows.get(credit_id)
        return None if s is None else s.row

    def count_by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self._t.rows.values():
            counts[s.row.status.value] = counts.get(s.row.status.value, 0) + 1
        return counts

    def oldest_unknown_age_s(self) -> float:
        since = [s.unknown_since_ms for s in self._t.rows.values() if s.row.status is CreditStatus.UNKNOWN]
        known = [t for t in since if t is not None]
        return 0.0 if not known else (self._now_ms - min(known)) / 1000

    def _log(self, credit_id: int, before: CreditStatus | None, to: CreditStatus, reason: str) -> None:
        self._t.transitions.append(
            (credit_id, None if before is None else before.value, to.value, reason[:REASON_CHARS_MAX])
        )
