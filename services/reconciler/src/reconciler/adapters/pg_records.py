"""``PgRecordStore``: the read models, written by the consumer in its batch transaction (psycopg).

Every insert is ``ON CONFLICT DO NOTHING`` on the record's own key: a record is kept once, with the
business date it was given the first time (redelivery and replays change nothing). An attention is
settled only by an event that comes after it (in the batch's order, which is the topic's order for
one payment): a row that failed and then needed a person stays unsettled."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Final

import psycopg
from backbone.logs import get_logger
from backbone.outbox import OutboxWriter

from reconciler.domain.cases import SEVERITY, CaseClass, evidence_digest
from reconciler.domain.intake import (
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
_FACT: Final = (
    "INSERT INTO money_facts (source_key, kind, payment_id, merchant_id, provider, provider_object_id,"
    " amount_minor, currency, deposit_reference, occurred_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_OPERATION: Final = (
    "INSERT INTO mt5_operations (source_key, kind, row_id, comment, payment_id, mt5_login, amount_minor,"
    " currency, deal_ticket, payment_amount_minor, payment_currency, fx_rate, cause_key, occurred_at_ms,"
    " business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_ATTENTION: Final = (
    "INSERT INTO attention (attention_key, source, subject_key, payment_id, kind, status, detail, facts,"
    " started_at_ms, raised_at_ms, business_date, event_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_SETTLE: Final = (
    "UPDATE attention SET settled_by = %s, settled_at_ms = %s WHERE subject_key = %s AND settled_by IS NULL"
)
# an outcome answers one approved command: a repair still waiting for it, with that digest
_REPAIR_DONE: Final = (
    "UPDATE repairs SET status = %s, outcome_detail = %s, finished_at = now()"
    " WHERE id = %s AND command_digest = %s AND status IN ('sent', 'unknown') RETURNING case_id"
)
_HISTORY: Final = "INSERT INTO case_history (case_id, action, actor, note) VALUES (%s, %s, %s, %s)"
_MONITOR_OPEN: Final = (
    "INSERT INTO cases (case_key, case_class, severity, business_date, status, summary, evidence,"
    " evidence_digest) VALUES (%s, %s, %s, %s, 'open', %s, %s, %s) ON CONFLICT (case_key) DO NOTHING"
    " RETURNING id"
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
                    cur.executemany(_ATTENTION, [_attention(r) for r in run if isinstance(r, Attention)])
                    kept += max(cur.rowcount, 0)
                else:
                    settles = [
                        (r.event_type, r.occurred_at_ms, r.subject_key) for r in run if isinstance(r, Settled)
                    ]
                    cur.executemany(_SETTLE, settles)
            for done in (r for r in records if isinstance(r, RepairDone)):
                kept += self._repair_done(cur, done)
            for alert in (r for r in records if isinstance(r, MonitorCase)):
                kept += self._monitor_case(cur, alert)
        return kept

    def _monitor_case(self, cur: psycopg.Cursor[Any], alert: MonitorCase) -> int:
        if alert.raised:
            severity = SEVERITY[CaseClass(alert.case_class)].value
            digest = evidence_digest(alert.evidence)
            row = cur.execute(
                _MONITOR_OPEN,
                (
                    alert.case_key,
                    alert.case_class,
                    severity,
                    alert.business_date,
                    alert.summary,
                    json.dumps(alert.evidence),
                    digest,
                ),
            ).fetchone()
            if row is None:  # the case exists already (a run found it first, or a redelivery)
                return 0
            cur.execute(_HISTORY, (row[0], "opened", "monitor", alert.summary))
            body = {
                "case_id": row[0],
                "business_date": alert.business_date.isoformat(),
                "case_class": alert.case_class,
                "source_key": alert.case_key,
                "summary": alert.summary[:500],
            }
            self._announce("CaseOpened", alert.case_key, body)
            return 1
        note = "the monitor saw the missing event arrive; the next run re-checks it"
        row = cur.execute(_MONITOR_CLEAR, (note, alert.case_key)).fetchone()
        if row is None:
            return 0
        cur.execute(_HISTORY, (row[0], "resolved", "monitor", note))
        self._announce(
            "CaseResolved", alert.case_key, {"case_id": row[0], "resolution": note, "resolved_by": "monitor"}
        )
        return 1

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
