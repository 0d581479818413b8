"""``LedgerStore`` on PostgreSQL (psycopg 3), bound to one connection inside an open transaction.

Set-based on purpose: a consumer batch of N journals costs a fixed number of round trips (lock,
references, accounts, one INSERT of journals and entries, one UPDATE of projections, one UPDATE of
the head, one COPY into the outbox), not N of each. A journal and its entries go in ONE statement
(a data-modifying CTE): the database's statement-level triggers check, at the end of it, that every
new journal has >= 2 entries balanced per currency (migrations/0001_ledger.sql).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Final

import psycopg
from backbone.invariants import invariant
from backbone.outbox import OutboxWriter

from ledger.adapters.journal_events import journal_posted
from ledger.application.ports import FloorBreached
from ledger.application.repairs import RepairOutcome
from ledger.domain.accounts import AccountKey, Direction
from ledger.domain.chain import ChainHead, PostedJournal
from ledger.domain.journals import Entry, JournalDraft, JournalKind, Source, SourceType
from ledger.domain.posting import KnownJournal

# A journal and its entries reach their tables in ONE statement (the database checks, at the end of
# it, that every new journal is complete and balanced). They are first COPYed into per-session
# staging tables: COPY is the cheapest way to ship thousands of rows from Python (psycopg formats
# rows in C), far cheaper than array parameters, which psycopg builds element by element.
_STAGING: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS ledger_stage_journals (LIKE journals) ON COMMIT DELETE ROWS;"
    " CREATE TEMP TABLE IF NOT EXISTS ledger_stage_entries (LIKE entries) ON COMMIT DELETE ROWS"
)
_JOURNAL_FIELDS: Final = (
    "id, reference, kind, rule, business_date, posted_at, payment_id, source_type, source_id, source_detail,"
    " corrects_journal_id, content_digest, prev_hash, hash"
)
_ENTRY_FIELDS: Final = "journal_id, line_no, account_id, direction, amount_minor, currency"
_INSERT_JOURNALS: Final = f"""
WITH j AS (INSERT INTO journals ({_JOURNAL_FIELDS}) SELECT {_JOURNAL_FIELDS} FROM ledger_stage_journals)
INSERT INTO entries ({_ENTRY_FIELDS}) SELECT {_ENTRY_FIELDS} FROM ledger_stage_entries
"""
# Lists of references and numbers travel as ONE text parameter split by the server (unit separator,
# never in a reference or a number; never an empty element): again cheaper than an array parameter.
_SEP: Final = "\x1f"
_LIST: Final = "string_to_array(%s, chr(31))"

_APPLY_DELTAS: Final = f"""
UPDATE balances b SET balance_minor = b.balance_minor + d.delta
FROM unnest({_LIST}::bigint[], {_LIST}::bigint[]) AS d(account_id, delta)
WHERE b.account_id = d.account_id AND (b.floor_minor IS NULL OR b.balance_minor + d.delta >= b.floor_minor)
RETURNING b.account_id
"""

# Account keys are looked up only for accounts the process has not seen committed yet (rare after
# warm-up), as arrays: a holder is often '' and the server splits '' into no element at all.
_ACCOUNTS: Final = """
SELECT a.code, a.currency, a.holder, a.id
FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(code, currency, holder)
JOIN accounts a USING (code, currency, holder)
"""

_JOURNAL_COLUMNS: Final = (
    "id, reference, kind, rule, business_date, posted_at, payment_id, source_type, source_id, source_detail,"
    " corrects_journal_id, content_digest, prev_hash, hash"
)
_ENTRY_ROWS: Final = (
    "SELECT e.journal_id, a.code, a.currency, a.holder, e.currency, e.direction, e.amount_minor"
    " FROM entries e JOIN accounts a ON a.id = e.account_id"
)


class AccountIds:
    """Account ids known to be committed, shared by a process's stores: accounts are append-only
    (never updated or deleted), so an id once seen committed never changes. Only ids read before
    the reading transaction inserted any account go in (an id our own transaction inserted could
    still roll back)."""

    def __init__(self, size_max: int = 1_000_000) -> None:
        self._ids: dict[AccountKey, int] = {}
        self._size_max = size_max

    def get(self, key: AccountKey) -> int | None:
        return self._ids.get(key)

    def remember(self, found: Mapping[AccountKey, int]) -> None:
        if len(self._ids) + len(found) > self._size_max:
            self._ids.clear()  # bounded: start over rather than grow without limit
        self._ids.update(found)


class PgLedgerStore:
    """The ledger's tables through one connection; the caller owns the transaction."""

    def __init__(
        self,
        conn: psycopg.Connection,
        outbox: OutboxWriter | None,
        events_topic: str,
        committed_ids: AccountIds | None = None,
        repair_outcomes_topic: str | None = None,
    ) -> None:
        self._conn = conn
        self._outbox = outbox
        self._topic = events_topic
        self._outcomes_topic = repair_outcomes_topic
        self._committed = committed_ids or AccountIds()
        self._ids: dict[AccountKey, int] = {}
        self._posted_at: datetime | None = None

    # -- posting -----------------------------------------------------------------------------------

    def lock_chain(self) -> tuple[ChainHead, datetime]:
        row = self._conn.execute(
            "SELECT last_journal_id, last_hash, last_posted_at FROM chain_head FOR UPDATE"
        ).fetchone()
        invariant(row is not None, "the chain head row exists (migration 0001)")
        assert row is not None
        # Read the clock after the lock, and never before the last posting: posted_at then never
        # decreases with the id, even if the server's clock steps back.
        now = self._conn.execute("SELECT greatest(clock_timestamp(), %s::timestamptz)", (row[2],)).fetchone()
        assert now is not None
        self._posted_at = now[0]
        return ChainHead(int(row[0]), bytes(row[1])), now[0]

    def known_journals(self, references: Collection[str]) -> dict[str, KnownJournal]:
        rows = self._conn.execute(
            "SELECT reference, id, content_digest FROM journals WHERE reference = ANY(%s)",
            (list(references),),
        ).fetchall()
        return {str(r[0]): KnownJournal(int(r[1]), bytes(r[2])) for r in rows}

    def open_accounts(self, keys: Collection[AccountKey]) -> None:
        wanted = []
        for key in keys:
            known = self._committed.get(key)
            if known is None:
                wanted.append(key)
            else:
                self._ids[key] = known
        if not wanted:
            return
        found = self._load_ids(sorted(wanted))
        self._committed.remember(found)  # read before this transaction inserted any account
        missing = [k for k in sorted(wanted) if k not in found]
        if missing:
            self._conn.execute(
                "INSERT INTO accounts (code, currency, holder) SELECT * FROM"
                " unnest(%b::text[], %b::text[], %b::text[]) ORDER BY 1, 2, 3 ON CONFLICT DO NOTHING",
                _columns(missing),
            )
            found.update(self._load_ids(missing))
        self._ids.update(found)
        invariant(all(k in self._ids for k in keys), "every account named is open")

    def _load_ids(self, keys: list[AccountKey]) -> dict[AccountKey, int]:
        rows = self._conn.execute(_ACCOUNTS, _columns(keys)).fetchall()
        return {
            AccountKey(code, currency, holder): int(account_id) for code, currency, holder, account_id in rows
        }

    def balances_for_update(self, keys: Collection[AccountKey]) -> dict[AccountKey, int]:
        if not keys:
            return {}
        by_id = {self._ids[key]: key for key in keys}
        rows = self._conn.execute(
            f"SELECT account_id, balance_minor FROM balances WHERE account_id = ANY({_LIST}::bigint[])"
            " ORDER BY account_id FOR UPDATE",
            (_pack(sorted(by_id)),),
        ).fetchall()
        invariant(len(rows) == len(by_id), "every open account has a projection")
        return {by_id[int(account_id)]: int(balance) for account_id, balance in rows}

    def append(
        self, journals: Sequence[PostedJournal], deltas: Mapping[AccountKey, int], head: ChainHead
    ) -> None:
        invariant(bool(journals) and journals[-1].journal_id == head.last_journal_id, "head follows journals")
        self._stage(journals)
        self._conn.execute(_INSERT_JOURNALS)
        changed = sorted((self._ids[key], delta) for key, delta in deltas.items() if delta != 0)
        if changed:
            ids, amounts = [c[0] for c in changed], [c[1] for c in changed]
            applied = self._conn.execute(_APPLY_DELTAS, (_pack(ids), _pack(amounts))).fetchall()
            if len(applied) != len(changed):
                raise FloorBreached(f"{len(changed) - len(applied)} account(s) would go below their floor")
        invariant(all(j.posted_at == self._posted_at for j in journals), "journals carry the locked time")
        self._conn.execute(
            "UPDATE chain_head SET last_journal_id = %s, last_hash = %s, last_posted_at = %s",
            (head.last_journal_id, head.last_hash, self._posted_at),
        )

    def announce(self, journals: Sequence[PostedJournal]) -> None:
        invariant(self._outbox is not None, "posting needs the outbox")
        assert self._outbox is not None
        outbox = self._outbox
        outbox.write(self._conn, [journal_posted(outbox, self._topic, j) for j in journals])

    def report_repairs(self, outcomes: Sequence[RepairOutcome]) -> None:
        invariant(self._outbox is not None, "repairs need the outbox")
        invariant(self._outcomes_topic is not None, "repairs need the outcomes topic")
        assert self._outbox is not None and self._outcomes_topic is not None
        outbox, topic = self._outbox, self._outcomes_topic
        messages = [outbox.event(topic, "RepairOutcome", o.request.payment_id, o.body()) for o in outcomes]
        outbox.write(self._conn, messages)

    def _stage(self, journals: Sequence[PostedJournal]) -> None:
        self._conn.execute(_STAGING)
        with self._conn.cursor() as cur:
            with cur.copy(f"COPY ledger_stage_journals ({_JOURNAL_FIELDS}) FROM STDIN") as copy:
                for j in journals:
                    copy.write_row(_journal_row(j))
            with cur.copy(f"COPY ledger_stage_entries ({_ENTRY_FIELDS}) FROM STDIN") as copy:
                for j in journals:
                    for line, e in enumerate(j.draft.entries, start=1):
                        copy.write_row(
                            (
                                j.journal_id,
                                line,
                                self._ids[e.account],
                                e.direction,
                                e.amount_minor,
                                e.currency,
                            )
                        )

    # -- reading back ------------------------------------------------------------------------------

    def journal(self, journal_id: int) -> PostedJournal | None:
        found = self._read_journals("WHERE id = %s", (journal_id,))
        return found[0] if found else None

    def journals_after(self, after_id: int, limit: int) -> list[PostedJournal]:
        return self._read_journals("WHERE id > %s ORDER BY id LIMIT %s", (after_id, limit))

    def _read_journals(self, where: str, params: tuple[Any, ...]) -> list[PostedJournal]:
        rows = self._conn.execute(f"SELECT {_JOURNAL_COLUMNS} FROM journals {where}", params).fetchall()
        if not rows:
            return []
        ids = [int(r[0]) for r in rows]
        entries = self._conn.execute(
            f"{_ENTRY_ROWS} WHERE e.journal_id = ANY(%s) ORDER BY e.journal_id, e.line_no", (ids,)
        ).fetchall()
        by_journal: dict[int, list[Entry]] = {}
        for jid, code, account_currency, holder, currency, direction, amount in entries:
            by_journal.setdefault(int(jid), []).append(
                _entry(code, account_currency, holder, currency, direction, int(amount))
            )
        return [_journal(row, tuple(by_journal.get(int(row[0]), ()))) for row in rows]

    def chain_head(self) -> ChainHead:
        row = self._conn.execute("SELECT last_journal_id, last_hash FROM chain_head").fetchone()
        assert row is not None
        return ChainHead(int(row[0]), bytes(row[1]))

    def projections(self) -> dict[AccountKey, int]:
        rows = self._conn.execute(
            "SELECT a.code, a.currency, a.holder, b.balance_minor FROM accounts a"
            " JOIN balances b ON b.account_id = a.id"
        ).fetchall()
        return {AccountKey(r[0], r[1], r[2]): int(r[3]) for r in rows}

    def rebuilt_balances(self) -> dict[AccountKey, int]:
        rows = self._conn.execute(
            "SELECT a.code, a.currency, a.holder, ac.account_type IN ('asset', 'expense'),"
            " coalesce(sum(CASE e.direction WHEN 'debit' THEN e.amount_minor ELSE -e.amount_minor END), 0)"
            " FROM accounts a JOIN account_codes ac ON ac.code = a.code"
            " LEFT JOIN entries e ON e.account_id = a.id GROUP BY a.id, ac.account_type"
        ).fetchall()
        return {AccountKey(r[0], r[1], r[2]): int(r[4]) if r[3] else -int(r[4]) for r in rows}

    def overwrite_projections(self, balances: Mapping[AccountKey, int]) -> None:
        for key, balance in sorted(balances.items()):
            self._conn.execute(
                "UPDATE balances b SET balance_minor = %s FROM accounts a"
                " WHERE a.id = b.account_id AND a.code = %s AND a.currency = %s AND a.holder = %s",
                (balance, key.code, key.currency, key.holder),
            )


def _pack(values: Iterable[object]) -> str:
    text = [str(v) for v in values]
    invariant(not any(_SEP in t for t in text), "a packed value contains the separator")
    return _SEP.join(text)


def _columns(keys: Iterable[AccountKey]) -> tuple[list[str], list[str], list[str]]:
    keys = list(keys)
    return [k.code for k in keys], [k.currency for k in keys], [k.holder for k in keys]


def _journal_row(j: PostedJournal) -> tuple[object, ...]:
    d = j.draft
    detail = json.dumps(d.source.detail_dict(), separators=(",", ":"))
    return (
        j.journal_id,
        d.reference,
        d.kind,
        d.rule,
        d.business_date,
        j.posted_at,
        d.payment_id,
        d.source.source_type,
        d.source.source_id,
        detail,
        d.corrects_journal_id,
        j.content_digest,
        j.prev_hash,
        j.hash,
    )


def _entry(
    code: str, account_currency: str, holder: str, currency: str, direction: str, amount: int
) -> Entry:
    # The database keeps an entry's currency equal to its account's; a difference can only come from
    # tampering. Read it into the key, so that the hash check reports it.
    shown = account_currency if account_currency == currency else f"{account_currency}!{currency}"
    return Entry(AccountKey(code, shown, holder), Direction(direction), amount)


def _journal(row: tuple[Any, ...], entries: tuple[Entry, ...]) -> PostedJournal:
    (
        jid,
        reference,
        kind,
        rule,
        business_date,
        posted_at,
        payment_id,
        source_type,
        source_id,
        detail,
        corrects,
        digest,
        prev_hash,
        hash_,
    ) = row
    invariant(isinstance(business_date, date), "business_date is a date")
    draft = JournalDraft(
        reference=reference,
        kind=JournalKind(kind),
        rule=rule,
        business_date=business_date,
        payment_id=payment_id,
        source=Source.of(SourceType(source_type), source_id, detail),
        entries=entries,
        corrects_journal_id=corrects,
    )
    return PostedJournal(int(jid), draft, posted_at, bytes(digest), bytes(prev_hash), bytes(hash_))
