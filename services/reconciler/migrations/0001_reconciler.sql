-- The reconciler's own tables (DESIGN.md §8; seeds 000 "对账", 002 §4, 004 Langkah 7).
-- Read models: what the reconciler learned from the other services' events (never their tables).
-- Imports: the PSP's reports, immutable, keyed by stable source keys, versioned per date.
-- Runs, the MT5 deals each run read, the matches (each record in at most one match per layer),
-- the findings of each run and the case queue.

CREATE TABLE money_facts (
  id                 bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,  -- what matches refer to
  source_key         text        PRIMARY KEY,  -- the ledger reference: capture:<op>, refund:<id>, chargeback:<id>
  kind               text        NOT NULL CHECK (kind IN ('capture', 'refund', 'chargeback')),
  payment_id         text        NOT NULL,
  merchant_id        text        NOT NULL,
  provider           text        NOT NULL,
  provider_object_id text        NOT NULL,
  amount_minor       bigint      NOT NULL CHECK (amount_minor >= 0),
  currency           char(3)     NOT NULL,
  deposit_reference  text,
  occurred_at_ms     bigint      NOT NULL,
  business_date      date        NOT NULL,
  event_id           text        NOT NULL
);
CREATE INDEX money_facts_date ON money_facts (business_date);
CREATE INDEX money_facts_provider_object ON money_facts (provider, kind, provider_object_id);
CREATE INDEX money_facts_payment ON money_facts (payment_id);

CREATE TABLE mt5_operations (
  id                   bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
  source_key           text    PRIMARY KEY,  -- mt5-credit:<id> | mt5-debit:<id>
  kind                 text    NOT NULL CHECK (kind IN ('credit', 'debit')),
  row_id               bigint  NOT NULL,
  comment              text    NOT NULL UNIQUE,
  payment_id           text    NOT NULL,
  mt5_login            bigint  NOT NULL,
  amount_minor         bigint  NOT NULL CHECK (amount_minor >= 0),
  currency             char(3) NOT NULL,
  deal_ticket          bigint  NOT NULL,
  payment_amount_minor bigint,
  payment_currency     char(3),
  fx_rate              text,
  cause_key            text,  -- a debit's money fact: refund:<refund_id> | chargeback:<chargeback_id>
  occurred_at_ms       bigint  NOT NULL,
  business_date        date    NOT NULL,
  event_id             text    NOT NULL
);
CREATE INDEX mt5_operations_date ON mt5_operations (business_date);
CREATE INDEX mt5_operations_cause ON mt5_operations (cause_key) WHERE cause_key IS NOT NULL;
CREATE INDEX mt5_operations_payment ON mt5_operations (payment_id);

CREATE TABLE journals (
  journal_id    bigint  PRIMARY KEY,
  reference     text    NOT NULL UNIQUE,
  payment_id    text    NOT NULL,
  business_date date    NOT NULL,
  balanced      boolean NOT NULL,
  entries       jsonb   NOT NULL,
  event_id      text    NOT NULL
);
CREATE INDEX journals_date ON journals (business_date);

-- Imports ------------------------------------------------------------------------------------------

CREATE TABLE imports (
  id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  provider      text        NOT NULL,
  report_type   text        NOT NULL CHECK (report_type IN ('settlement', 'bank_deposits')),
  business_date date        NOT NULL,
  version       integer     NOT NULL CHECK (version >= 1),
  digest        bytea       NOT NULL,
  source        text        NOT NULL,  -- 'api' or 'file:<name>'
  row_count     integer     NOT NULL,
  changes       jsonb       NOT NULL DEFAULT '{}',  -- against the previous version: added/removed/changed keys
  imported_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (provider, report_type, business_date, version),
  UNIQUE (provider, report_type, business_date, digest)
);

CREATE TABLE settlement_rows (
  id                     bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
  import_id              bigint  NOT NULL REFERENCES imports (id),
  source_key             text    NOT NULL,
  line_no                integer NOT NULL,
  balance_transaction_id text    NOT NULL,
  type                   text    NOT NULL CHECK (type IN ('charge', 'refund', 'dispute')),
  payment_intent_id      text    NOT NULL,
  source_id              text    NOT NULL,
  reference              text,
  source_reference       text,
  currency               char(3) NOT NULL,
  gross_minor            bigint  NOT NULL,
  fee_minor              bigint  NOT NULL,
  net_minor              bigint  NOT NULL,
  payout_batch_id        text    NOT NULL,
  created_at_ms          bigint  NOT NULL,
  PRIMARY KEY (import_id, source_key)
);

CREATE TABLE bank_rows (
  import_id       bigint  NOT NULL REFERENCES imports (id),
  source_key      text    NOT NULL,
  line_no         integer NOT NULL,
  deposit_id      text    NOT NULL,
  payout_batch_id text    NOT NULL,
  value_date      date    NOT NULL,
  currency        char(3) NOT NULL,
  amount_minor    bigint  NOT NULL,
  item_count      integer NOT NULL,
  bank_reference  text    NOT NULL,
  PRIMARY KEY (import_id, source_key)
);

CREATE FUNCTION reconciler_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'imports are immutable: % on % refused', TG_OP, TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER imports_immutable BEFORE UPDATE OR DELETE ON imports
  FOR EACH ROW EXECUTE FUNCTION reconciler_immutable();
CREATE TRIGGER settlement_rows_immutable BEFORE UPDATE OR DELETE ON settlement_rows
  FOR EACH ROW EXECUTE FUNCTION reconciler_immutable();
CREATE TRIGGER bank_rows_immutable BEFORE UPDATE OR DELETE ON bank_rows
  FOR EACH ROW EXECUTE FUNCTION reconciler_immutable();

-- Runs ---------------------------------------------------------------------------------------------

CREATE TABLE runs (
  id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  business_date        date        NOT NULL,
  status               text        NOT NULL CHECK (status IN ('running', 'clean', 'discrepancies', 'incomplete', 'failed')),
  started_at           timestamptz NOT NULL DEFAULT now(),
  finished_at          timestamptz,
  as_of_ms             bigint      NOT NULL,  -- "now" for the grace period
  settlement_import_id bigint      REFERENCES imports (id),
  bank_import_id       bigint      REFERENCES imports (id),
  problems             jsonb       NOT NULL DEFAULT '[]',  -- why a run is incomplete or failed
  summary              jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX runs_date ON runs (business_date, id);
-- at most one running run per date (with the advisory lock; a crashed run is marked failed first)
CREATE UNIQUE INDEX runs_one_running ON runs (business_date) WHERE status = 'running';

-- The per-run tables (deals, matches, findings) name their run without a foreign key: a run row is
-- never deleted, and the check would cost a trigger call per row on a million-row day.
CREATE TABLE mt5_deals (
  run_id  bigint  NOT NULL,
  ticket  bigint  NOT NULL,
  login   bigint  NOT NULL,
  action  integer NOT NULL,
  comment text    NOT NULL,
  profit  numeric NOT NULL,
  time_ms bigint  NOT NULL,
  PRIMARY KEY (run_id, ticket)
);
CREATE INDEX mt5_deals_comment ON mt5_deals (run_id, comment);

CREATE TABLE currency_exponents (
  currency char(3) PRIMARY KEY,
  exponent integer NOT NULL
);

-- One row per matched pair and layer; a record takes part in at most one match per layer and run.
-- Records are named by their bigint ids (settlement_rows.id, money_facts.id, mt5_operations.id,
-- mt5_deals.ticket). One partition per run: a run fills its own table without indexes, then
-- builds the unique indexes by sort and attaches it (bulk load, then index: a million-row day's
-- pairs are not checked one by one).
CREATE TABLE matches (
  run_id   bigint NOT NULL,
  layer    text   NOT NULL CHECK (layer IN ('settlement_fact', 'capture_credit', 'takeback_debit', 'operation_deal')),
  left_id  bigint NOT NULL,
  right_id bigint NOT NULL,
  UNIQUE (run_id, layer, left_id),
  UNIQUE (run_id, layer, right_id)
) PARTITION BY LIST (run_id);

CREATE TABLE findings (
  run_id     bigint NOT NULL,
  case_key   text   NOT NULL,
  case_class text   NOT NULL,
  summary    text   NOT NULL,
  evidence   jsonb  NOT NULL,
  PRIMARY KEY (run_id, case_key)
);

-- Cases --------------------------------------------------------------------------------------------

CREATE TABLE cases (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  case_key        text        NOT NULL UNIQUE,
  case_class      text        NOT NULL,
  severity        text        NOT NULL CHECK (severity IN ('high', 'medium')),
  business_date   date        NOT NULL,
  status          text        NOT NULL CHECK (status IN ('open', 'acknowledged', 'resolved')),
  summary         text        NOT NULL,
  evidence        jsonb       NOT NULL,
  evidence_digest bytea       NOT NULL,
  first_run_id    bigint      NOT NULL REFERENCES runs (id),
  last_run_id     bigint      NOT NULL REFERENCES runs (id),
  reopened        integer     NOT NULL DEFAULT 0,
  opened_at       timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  resolved_at     timestamptz,
  resolution      text
);
CREATE INDEX cases_open ON cases (business_date, status);

CREATE TABLE case_history (
  id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  case_id  bigint      NOT NULL REFERENCES cases (id),
  at       timestamptz NOT NULL DEFAULT now(),
  action   text        NOT NULL CHECK (action IN ('opened', 'evidence_changed', 'reopened', 'resolved', 'acknowledged')),
  run_id   bigint      REFERENCES runs (id),
  actor    text        NOT NULL,  -- 'reconciler' or the operator
  note     text
);
CREATE INDEX case_history_case ON case_history (case_id, id);
