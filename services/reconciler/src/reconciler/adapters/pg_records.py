"""``PgRecordStore``: the read models, written by the consumer in its batch transaction (psycopg).

Every insert is ``ON CONFLICT DO NOTHING`` on the record's own key: a record is kept once, with the
business date it was given the first time (redelivery and replays change nothing). An attention is
settled only by an event that comes after it (in the batch's order, which is the topic's order for
one payment): a row that failed and then needed a person stays unsettled."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from datetime import date
from typing import Any, Final

import psycopg
from backbone.logs import get_logger
from backbone.outbox import OutboxWriter

from reconciler.adapters import pg_merchants
from reconciler.domain.cases import SEVERITY, CaseClass, evidence_digest
from reconciler.domain.merchants import merchant_of, refs_of
from reconciler.domain.records import (
    Attention,
    Journal,
    MoneyFact,
    MonitorCase,
    Mt5Operation,
    Record,
    RepairDone,
    Settled,
)

log = get_logger(__name__)
ACTOR: Final = "reconciler"
_FACT: Final = (
    "INSERT INTO money_facts (source_key, kind, payment_id, merchant_id, provider, provider_object_id,"
    " amount_minor, currency, deposit_reference, occurred_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_OPERATION: Final = (
    "INSERT INTO mt5_operations (source_key, kind, row_id, comment, payment_id, mt5_login, amount_minor,"
    " currency, deal_ticket, payment_amount_minor, payment_currency, fx_rate, cause_key, withdrawal_id,"
    " occurred_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_ATTENTION: Final = (
    "INSERT INTO attention (attention_key, source, subject_key, payment_id, kind, status, detail, facts,"
    " started_at_ms, raised_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_SETTLE: Final = (
    "UPDATE attention a SET settled_by = u.by, settled_at_ms = u.at"
    " FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS u(subject, by, at)"
    " WHERE a.subject_key = u.subject AND a.settled_by IS NULL"
    " RETURNING a.attention_key, a.source, a.subject_key"
)
# an outcome answers one approved command: a repair still waiting for it, with that digest
_REPAIR_DONE: Final = (
    "UPDATE repairs SET status = %s, outcome_detail = %s, finished_at = now()"
    " WHERE id = %s AND command_digest = %s AND status IN ('sent', 'unknown') RETURNING case_id"
)
_HISTORY: Final = "INSERT INTO case_history (case_id, action, actor, note) VALUES (%s, %s, %s, %s)"
_MONITOR_OPEN: Final = (
    "INSERT INTO cases (case_key, case_class, severity, business_date, status, summary, evidence,"
    " evidence_digest, merchant_id) VALUES (%s, %s, %s, %s, 'open', %s, %s, %s, %s)"
    " ON CONFLICT (case_key) DO NOTHING RETURNING id"
)
# the monitor resolves only what no run has confirmed yet (a run's evidence outranks an alert's)
_MONITOR_CLEAR: Final = (
    "UPDATE cases SET status = 'resolved', resolved_at = now(), updated_at = now(), resolution = %s"
    " WHERE case_key = %s AND status <> 'resolved' AND last_run_id IS NULL RETURNING id"
)
_JOURNAL: Final = (
    "INSERT INTO journals (journal_id, reference, payment_id, business_date, balanced, entries, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)


def _fact(r: MoneyFact) -> tuple[Any, ...]:
    return (
        r.source_key,
        r.kind,
        r.payment_id,
        r.merchant_id,
        r.provider,
        r.provider_object_id,
        r.amount_minor,
        r.currency,
        r.deposit_reference,
        r.occurred_at_ms,
        r.business_date,
        r.event_id,
    )


def _operation(r: Mt5Operation) -> tuple[Any, ...]:
    return (
        r.source_key,
        r.kind,
        r.row_id,
        r.comment,
        r.payment_id,
        r.mt5_login,
        r.amount_minor,
        r.currency,
        r.deal_ticket,
        r.payment_amount_minor,
        r.payment_currency,
        r.fx_rate,
        r.cause_key,
        r.withdrawal_id,
        r.occurred_at_ms,
        r.business_date,
        r.event_id,
    )


def _journal(r: Journal) -> tuple[Any, ...]:
    entries = [{"account": a, "direction": d, "amount_minor": m, "currency": c} for a, d, m, c in r.entries]
    return (
        r.journal_id,
        r.reference,
        r.payment_id,
        r.business_date,
        r.balanced,
        json.dumps(entries),
        r.event_id,
    )


def _attention(r: Attention) -> tuple[Any, ...]:
    return (
        r.attention_key,
        r.source,
        r.subject_key,
        r.payment_id,
        r.kind,
        r.status,
        r.detail,
        json.dumps(r.facts),
        r.started_at_ms,
        r.raised_at_ms,
        r.business_date,
        r.event_id,
    )


def _attention_class(source: str, subject_key: str | None) -> str:
    """The layer-1 class of an attention (as ``adapters.matching.stale`` names it)."""
    if source == "mt5_credit":
        return CaseClass.STALE_MT5_OPERATION.value
    return (CaseClass.STALE_OPERATION if subject_key is not None else CaseClass.NEEDS_ATTENTION).value


def _attention_json(r: Attention) -> dict[str, Any]:
    return {
        "attention_key": r.attention_key,
        "source": r.source,
        "subject_key": r.subject_key,
        "payment_id": r.payment_id,
        "kind": r.kind,
        "status": r.status,
        "detail": r.detail,
        "facts": r.facts,
        "started_at_ms": r.started_at_ms,
        "raised_at_ms": r.raised_at_ms,
        "business_date": r.business_date.isoformat(),
        "event_id": r.event_id,
    }


class PgRecordStore:
    def __init__(
        self, conn: psycopg.Connection, outbox: OutboxWriter | None = None, events_topic: str = "recon.events"
    ) -> None:
        self._conn, self._outbox, self._events_topic = conn, outbox, events_topic

    def keep(self, records: Sequence[Record]) -> int:
        facts = [_fact(r) for r in records if isinstance(r, MoneyFact)]
        operations = [_operation(r) for r in records if isinstance(r, Mt5Operation)]
        journals = [_journal(r) for r in records if isinstance(r, Journal)]
        kept = 0
        with self._conn.cursor() as cur:
            for sql, rows in ((_FACT, facts), (_OPERATION, operations), (_JOURNAL, journals)):
                if rows:
                    cur.executemany(sql, rows)
                    kept += max(cur.rowcount, 0)
            # attentions and what settles them, in the batch's order (a run of one statement at a time)
            ordered = [r for r in records if isinstance(r, Attention | Settled)]
            for is_attention, run in itertools.groupby(ordered, key=lambda r: isinstance(r, Attention)):
                if is_attention:
                    kept += sum(self._attention(cur, r) for r in run if isinstance(r, Attention))
                else:
                    ends = [r for r in run if isinstance(r, Settled)]
                    settled = cur.execute(
                        _SETTLE,
                        (
                            [r.subject_key for r in ends],
                            [r.event_type for r in ends],
                            [r.occurred_at_ms for r in ends],
                        ),
                    ).fetchall()
                    for key, source, subject in settled:
                        case_key = f"{_attention_class(source, subject)}:{key}"
                        self._resolve_early(cur, case_key, "a later event ended the operation")
            for done in (r for r in records if isinstance(r, RepairDone)):
                kept += self._repair_done(cur, done)
            for alert in (r for r in records if isinstance(r, MonitorCase)):
                kept += self._monitor_case(cur, alert)
        return kept

    def _attention(self, cur: psycopg.Cursor[Any], r: Attention) -> int:
        """Keep it, and open its case at once (the run's layer 1 finds the same key later)."""
        cur.execute(_ATTENTION, _attention(r))
        if cur.rowcount != 1:
            return 0
        case_class = _attention_class(r.source, r.subject_key)
        summary = f"{r.source}: {r.kind} {r.status or 'open'} (payment {r.payment_id}): {r.detail}"
        evidence = {"attention": _attention_json(r)}
        self._open_early(
            cur, f"{case_class}:{r.attention_key}", case_class, r.business_date, summary, evidence, r.source
        )
        return 1

    def _open_early(
        self,
        cur: psycopg.Cursor[Any],
        case_key: str,
        case_class: str,
        business_date: date,
        summary: str,
        evidence: dict[str, Any],
        actor: str,
    ) -> bool:
        """Open a case before any run finds it (nothing if the key is taken), with the merchant its
        records name (the batch's own records included: they are written before)."""
        severity = SEVERITY[CaseClass(case_class)].value
        refs = refs_of(evidence)
        merchant = merchant_of(refs, pg_merchants.known(cur, refs))
        row = cur.execute(
            _MONITOR_OPEN,
            (
                case_key,
                case_class,
                severity,
                business_date,
                summary,
                json.dumps(evidence),
                evidence_digest(evidence),
                merchant,
            ),
        ).fetchone()
        if row is None:
            return False
        cur.execute(_HISTORY, (row[0], "opened", actor, summary))
        body = {
            "case_id": row[0],
            "business_date": business_date.isoformat(),
            "case_class": case_class,
            "source_key": case_key,
            "summary": summary[:500],
        }
        self._announce("CaseOpened", case_key, body)
        return True

    def _resolve_early(self, cur: psycopg.Cursor[Any], case_key: str, why: str) -> bool:
        """Resolve a case no run has confirmed yet (a run's evidence outranks an event's)."""
        note = f"{why}; the next run re-checks it"
        row = cur.execute(_MONITOR_CLEAR, (note, case_key)).fetchone()
        if row is None:
            return False
        cur.execute(_HISTORY, (row[0], "resolved", ACTOR, note))
        self._announce(
            "CaseResolved", case_key, {"case_id": row[0], "resolution": note, "resolved_by": ACTOR}
        )
        return True

    def _monitor_case(self, cur: psycopg.Cursor[Any], alert: MonitorCase) -> int:
        if alert.raised:
            opened = self._open_early(
                cur,
                alert.case_key,
                alert.case_class,
                alert.business_date,
                alert.summary,
                alert.evidence,
                "monitor",
            )
            return int(opened)
        return int(self._resolve_early(cur, alert.case_key, "the monitor saw the missing event arrive"))

    def _announce(self, event_type: str, key: str, body: dict[str, Any]) -> None:
        if self._outbox is not None:
            self._outbox.write(self._conn, [self._outbox.event(self._events_topic, event_type, key, body)])

    @staticmethod
    def _repair_done(cur: psycopg.Cursor[Any], done: RepairDone) -> int:
        row = cur.execute(
            _REPAIR_DONE, (done.outcome, done.detail[:1000], done.repair_id, done.command_digest)
        ).fetchone()
        if row is None:  # a redelivery, or an answer to no waiting command: nothing to change
            log.info("reconciler.repair_outcome_ignored", repair_id=done.repair_id, event_id=done.event_id)
            return 0
        found = f" ({done.reference})" if done.reference else ""
        note = f"repair {done.repair_id} {done.outcome} by {done.executed_by}: {done.detail}{found}"
        cur.execute(_HISTORY, (row[0], f"repair_{done.outcome}", done.executed_by, note[:2000]))
        return 1
