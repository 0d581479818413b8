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

from reconciler.domain.intake import Attention, Journal, MoneyFact, Mt5Operation, Record, RepairDone, Settled

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
_REPAIR_HISTORY: Final = "INSERT INTO case_history (case_id, action, actor, note) VALUES (%s, %s, %s, %s)"
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
    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn

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
        return kept

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
        cur.execute(_REPAIR_HISTORY, (row[0], f"repair_{done.outcome}", done.executed_by, note[:2000]))
        return 1
