-- The ledger: a chart of account codes, accounts per (code, currency, holder), journals and their
-- entries (append-only, hash-chained), balance projections, and the chain head.
--
-- What the database itself enforces (not only the code):
-- * journals, entries and accounts refuse UPDATE, DELETE and TRUNCATE for every role, the owner
--   included (triggers); the runtime role additionally has no such privileges (see provisioning);
-- * a journal and all its entries are written by ONE statement (a data-modifying CTE): at the end of
--   that statement every new journal must have >= 2 entries that balance per currency, on existing
--   accounts of the entry's currency, and no entry may ever be added to a journal afterwards;
-- * a balance projection never goes below its account's floor (CHECK), one reversal per journal,
--   one journal per business reference (UNIQUE).

CREATE TABLE account_codes (
    code         text    PRIMARY KEY CHECK (code ~ '^[a-z][a-z0-9_]{1,62}$'),
    account_type text    NOT NULL CHECK (account_type IN ('asset', 'liability', 'income', 'expense')),
    per_holder   boolean NOT NULL,        -- true: one account per holder (e.g. per MT5 login)
    floor_minor  bigint,                  -- lowest balance allowed (normal side); NULL: no floor
    description  text    NOT NULL
);

INSERT INTO account_codes (code, account_type, per_holder, floor_minor, description) VALUES
  ('psp_receivable',          'asset',     false, NULL, 'Captured money the PSP owes us, less refunds and chargebacks, until paid out'),
  ('bank_cash',               'asset',     false, NULL, 'Money paid out by the PSP into our bank account'),
  ('fx_clearing',             'asset',     false, NULL, 'FX position: payment currency in, MT5 account currency out'),
  ('mt5_suspense',            'asset',     false, NULL, 'MT5 balance operations awaiting an explanation (repairs, unbooked deals)'),
  ('client_deposits_pending', 'liability', false, NULL, 'Client money between the PSP and MT5: captured not yet credited, or returned not yet debited'),
  ('unallocated_receipts',    'liability', false, NULL, 'Captured money that belongs to no deposit intent, until allocated or refunded'),
  ('client_mt5_balances',     'liability', true,  0,    'Client money credited to MT5 trading accounts, one account per MT5 login'),
  ('fx_gains',                'income',    false, NULL, 'FX differences in our favour (compensating journals)'),
  ('psp_fees',                'expense',   false, NULL, 'Fees the PSP kept from settlement payouts'),
  ('chargeback_losses',       'expense',   false, NULL, 'Chargebacks written off when the money could not be taken back from MT5');

CREATE TABLE accounts (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code      text        NOT NULL REFERENCES account_codes (code),
    currency  text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    holder    text        NOT NULL DEFAULT '' CHECK (length(holder) <= 64),
    opened_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (code, currency, holder)
);

-- Balance projection, one row per account, updated in the posting transaction. Normal side: debits
-- minus credits for assets and expenses, credits minus debits for liabilities and income.
CREATE TABLE balances (
    account_id      bigint PRIMARY KEY REFERENCES accounts (id),
    balance_minor   bigint NOT NULL DEFAULT 0,
    floor_minor     bigint,
    last_journal_id bigint NOT NULL DEFAULT 0,
    CHECK (floor_minor IS NULL OR balance_minor >= floor_minor)
);

-- Per-holder codes need a holder, the others must not have one; every account gets its projection.
CREATE FUNCTION ledger_open_account() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chart account_codes;
BEGIN
    SELECT * INTO chart FROM account_codes WHERE code = NEW.code;
    IF chart.per_holder AND NEW.holder = '' THEN
        RAISE EXCEPTION 'ledger: account code % needs a holder', NEW.code USING ERRCODE = 'check_violation';
    END IF;
    IF NOT chart.per_holder AND NEW.holder <> '' THEN
        RAISE EXCEPTION 'ledger: account code % takes no holder', NEW.code USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO balances (account_id, floor_minor) VALUES (NEW.id, chart.floor_minor);
    RETURN NULL;
END;
$$;
CREATE TRIGGER accounts_open AFTER INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION ledger_open_account();

-- The journal id is its position in the hash chain: 1, 2, 3, ... without gaps, assigned under the
-- chain-head lock. hash = sha256(prev_hash || canonical content incl. entries), see domain/chain.py.
CREATE TABLE journals (
    id                  bigint      PRIMARY KEY CHECK (id > 0),
    reference           text        NOT NULL UNIQUE CHECK (reference ~ '^[a-z0-9-]+:.+$'),
    kind                text        NOT NULL CHECK (kind IN ('posting', 'reversal', 'compensation')),
    rule                text        NOT NULL,        -- the posting rule that built it, e.g. payment_captured
    business_date       date        NOT NULL,
    posted_at           timestamptz NOT NULL,
    payment_id          text,                        -- NULL for journals about no single payment (settlement)
    source_type         text        NOT NULL CHECK (source_type IN ('event', 'settlement', 'operator')),
    source_id           text        NOT NULL,        -- event_id, settlement import id, operator action id
    source_detail       jsonb       NOT NULL,        -- topic/partition/offset, or who and why
    corrects_journal_id bigint      REFERENCES journals (id),
    content_digest      bytea       NOT NULL CHECK (length(content_digest) = 32),
    prev_hash           bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash                bytea       NOT NULL CHECK (length(hash) = 32),
    CHECK ((kind = 'posting') = (corrects_journal_id IS NULL)),
    CHECK (corrects_journal_id IS NULL OR corrects_journal_id < id)
);
CREATE INDEX journals_payment_idx ON journals (payment_id, id) WHERE payment_id IS NOT NULL;
-- "Balance as of a time": posted_at never decreases with id (the store takes the later of the clock
-- and the head's last posted_at), so the last journal posted by a time is one index probe away.
CREATE INDEX journals_posted_at_idx ON journals (posted_at, id);
CREATE UNIQUE INDEX journals_one_reversal ON journals (corrects_journal_id) WHERE kind = 'reversal';

CREATE TABLE entries (
    journal_id   bigint   NOT NULL,
    line_no      smallint NOT NULL CHECK (line_no >= 1),
    account_id   bigint   NOT NULL,
    direction    text     NOT NULL CHECK (direction IN ('debit', 'credit')),
    amount_minor bigint   NOT NULL CHECK (amount_minor > 0),
    currency     text     NOT NULL,
    PRIMARY KEY (journal_id, line_no)
);
CREATE INDEX entries_account_idx ON entries (account_id, journal_id, line_no);

-- One row: the last journal of the chain. Every posting transaction locks it first (FOR UPDATE) and
-- holds it to commit: that serializes posting, makes ids gapless and the hash chain a chain.
CREATE TABLE chain_head (
    singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    last_journal_id bigint      NOT NULL CHECK (last_journal_id >= 0),
    last_hash       bytea       NOT NULL CHECK (length(last_hash) = 32),
    last_posted_at  timestamptz NOT NULL
);
INSERT INTO chain_head (last_journal_id, last_hash, last_posted_at)
VALUES (0, decode(repeat('00', 32), 'hex'), '1970-01-01T00:00:00Z');

-- Append-only, for everyone: corrections are new journals (reversing or compensating).
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % on % refused: the ledger is append-only; post a reversing or compensating journal',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER journals_append_only BEFORE UPDATE OR DELETE ON journals
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journals_no_truncate BEFORE TRUNCATE ON journals
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER entries_append_only BEFORE UPDATE OR DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER entries_no_truncate BEFORE TRUNCATE ON entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER accounts_append_only BEFORE UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER accounts_no_truncate BEFORE TRUNCATE ON accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Entries: checked per statement (set-based, once per batch, not once per row). Every journal the
-- statement touches must receive ALL its entries in this statement: at least two, balanced per
-- currency, each on an existing account of the entry's currency.
CREATE FUNCTION ledger_check_entries() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.journal_id, n.lines INTO bad
    FROM (SELECT journal_id, count(*) AS lines FROM new_entries GROUP BY journal_id) n
    WHERE n.lines < 2
       OR NOT EXISTS (SELECT 1 FROM journals j WHERE j.id = n.journal_id)
       OR (SELECT count(*) FROM entries e WHERE e.journal_id = n.journal_id) <> n.lines
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: journal % must get all its entries (>= 2) in the statement that inserts it', bad.journal_id
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT journal_id, currency INTO bad FROM new_entries GROUP BY journal_id, currency
    HAVING sum(CASE direction WHEN 'debit' THEN amount_minor ELSE -amount_minor END) <> 0
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: journal % does not balance in %', bad.journal_id, bad.currency
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT e.journal_id, e.line_no INTO bad FROM new_entries e LEFT JOIN accounts a ON a.id = e.account_id
    WHERE a.id IS NULL OR a.currency <> e.currency LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: journal % line %: unknown account or currency differs from the account''s',
            bad.journal_id, bad.line_no USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER entries_check AFTER INSERT ON entries REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_entries();

-- Journals: at the end of the statement that inserted them, every new journal has entries (they
-- came in the same statement, through a data-modifying CTE, and were checked above).
CREATE FUNCTION ledger_check_journals() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    SELECT j.id INTO bad FROM new_journals j
    WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.journal_id = j.id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: journal % has no entries: a journal and its entries are inserted by one statement', bad
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER journals_check AFTER INSERT ON journals REFERENCING NEW TABLE AS new_journals
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_journals();
