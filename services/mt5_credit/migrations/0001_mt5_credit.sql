-- mt5-credit's own tables (DESIGN.md §2, §3 steps 1 and 5-7; seed 000).
-- Accounts: the customer <-> MT5 login mapping this service owns. Deposit intents: created by our
-- server for a logged-in customer and one of their logins. Credit rows: one balance operation each,
-- claimed with one atomic UPDATE under a lease, resolved by looking the deal up by its comment.

CREATE TABLE mt5_accounts (
  mt5_login    bigint      PRIMARY KEY CHECK (mt5_login > 0),
  customer_id  text        NOT NULL CHECK (customer_id <> ''),
  currency     char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  enabled      boolean     NOT NULL DEFAULT true,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deposit_intents (
  deposit_reference text        PRIMARY KEY,
  merchant_id       text        NOT NULL,
  customer_id       text        NOT NULL,
  mt5_login         bigint      NOT NULL REFERENCES mt5_accounts (mt5_login),
  amount_minor      bigint      NOT NULL CHECK (amount_minor > 0),
  currency          char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  idempotency_key   text        NOT NULL,
  request_digest    text        NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  UNIQUE (merchant_id, idempotency_key)
);

CREATE TABLE mt5_credits (
  id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind                 text        NOT NULL CHECK (kind IN ('credit', 'debit')),
  -- One row per business operation: payment:<provider>:<psp payment id>, refund:<id>, chargeback:<id>.
  source_key           text        NOT NULL UNIQUE,
  payment_id           text        NOT NULL,  -- Kafka key of every event about this row
  deposit_reference    text        NOT NULL REFERENCES deposit_intents (deposit_reference),
  provider             text        NOT NULL,
  provider_payment_id  text,
  debit_reason         text        CHECK (debit_reason IN ('refund', 'chargeback')),
  source_reference     text,       -- refund_id / chargeback_id for debits
  original_credit_id   bigint      REFERENCES mt5_credits (id),
  mt5_login            bigint      NOT NULL,
  customer_id          text        NOT NULL,
  amount_minor         bigint      NOT NULL CHECK (amount_minor > 0),  -- account currency, absolute
  currency             char(3)     NOT NULL,
  payment_amount_minor bigint      NOT NULL CHECK (payment_amount_minor > 0),
  payment_currency     char(3)     NOT NULL,
  fx_rate              numeric,    -- set once at creation when currencies differ; never recomputed
  fx_source            text,
  fx_taken_at          timestamptz,
  status               text        NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'claimed', 'unknown', 'done', 'failed')),
  mt5_deal_ticket      bigint      UNIQUE,
  attempts             integer     NOT NULL DEFAULT 0,  -- claims so far (MT5 calls started at most)
  claim_token          uuid,       -- who holds the current claim; outcomes are written only with it
  first_claimed_at     timestamptz,
  claimed_at           timestamptz,
  lease_expires_at     timestamptz,
  unknown_since        timestamptz,
  lookups              integer     NOT NULL DEFAULT 0,
  silent_lookups       integer     NOT NULL DEFAULT 0,  -- lookups without an answer since unknown
  next_lookup_at       timestamptz,
  needs_person         boolean     NOT NULL DEFAULT false,  -- the resolver stops; a case is open
  last_retcode         text,
  last_reason          text,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now(),
  CHECK ((kind = 'credit') = (debit_reason IS NULL)),
  CHECK ((kind = 'debit') = (original_credit_id IS NOT NULL)),
  CHECK (status <> 'done' OR mt5_deal_ticket IS NOT NULL),
  CHECK (status <> 'claimed' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
  CHECK ((fx_rate IS NULL) = (currency = payment_currency))
);

CREATE INDEX mt5_credits_pending ON mt5_credits (id) WHERE status = 'pending';
CREATE INDEX mt5_credits_claimed_lease ON mt5_credits (lease_expires_at) WHERE status = 'claimed';
CREATE INDEX mt5_credits_unknown ON mt5_credits (next_lookup_at) WHERE status = 'unknown' AND NOT needs_person;
CREATE INDEX mt5_credits_deposit ON mt5_credits (deposit_reference);
-- One credit per deposit intent, whatever the number of payments that name it: a second captured
-- payment for an intent already being credited is a case for a person (it is money received twice),
-- never a second automatic credit. Two consumers racing on two payments meet here.
CREATE UNIQUE INDEX mt5_credits_one_credit_per_deposit ON mt5_credits (deposit_reference) WHERE kind = 'credit';

-- Every status change, for audit and for the tests' "what happened" questions.
CREATE TABLE mt5_credit_transitions (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  credit_id   bigint      NOT NULL REFERENCES mt5_credits (id),
  from_status text,
  to_status   text        NOT NULL,
  reason      text        NOT NULL,
  at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mt5_credit_transitions_credit ON mt5_credit_transitions (credit_id);

-- Work for a person: a refused fact (no row could be made) or a row the machine will not decide.
-- One open case per subject and kind, so redelivery and repeated lookups do not pile them up.
CREATE TABLE credit_cases (
  id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subject           text        NOT NULL,  -- source_key of a refused fact, or 'credit:<id>'
  case_kind         text        NOT NULL,  -- refused | rejected | conflict | no_answer | precheck
  credit_id         bigint      REFERENCES mt5_credits (id),
  deposit_reference text,
  reason            text        NOT NULL,
  opened_at         timestamptz NOT NULL DEFAULT now(),
  resolved_at       timestamptz,
  resolved_by       text,
  resolution        text,
  UNIQUE (subject, case_kind)
);

-- Wake the executor when a row becomes pending (the poll is only the fallback).
CREATE FUNCTION mt5_credits_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('mt5_credits_pending', '');
  RETURN NULL;
END $$;
CREATE TRIGGER mt5_credits_pending_notify
  AFTER INSERT OR UPDATE OF status ON mt5_credits
  FOR EACH STATEMENT EXECUTE FUNCTION mt5_credits_notify();
