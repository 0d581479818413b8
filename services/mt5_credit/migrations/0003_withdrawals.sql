-- Withdrawals (issue 14, docs/adr/0008-withdrawals.md): money off a client's MT5 account first
-- (a debit row, deal comment 'wdr:<id>'), then one payout at the PSP (payment-state); a payout
-- that failed or came back is given back by a credit row (deal comment 'wbk:<id>').

-- The card a deposit was paid with (the PSP's token, never a card number): the only destinations a
-- later withdrawal of the same customer may be paid out to.
ALTER TABLE mt5_credits ADD COLUMN payment_method_token text;
-- Why a credit row puts money on MT5: a deposit (also a repair credit for one) or the return of a
-- withdrawal whose payout failed or came back.
ALTER TABLE mt5_credits ADD COLUMN credit_reason text NOT NULL DEFAULT 'deposit'
  CHECK (credit_reason IN ('deposit', 'withdrawal_return'));
ALTER TABLE mt5_credits ADD COLUMN withdrawal_id text;

ALTER TABLE mt5_credits DROP CONSTRAINT mt5_credits_debit_reason_check;
ALTER TABLE mt5_credits ADD CONSTRAINT mt5_credits_debit_reason_check
  CHECK (debit_reason IN ('refund', 'chargeback', 'withdrawal'));
-- A refund or chargeback debit reverses a credit; a withdrawal debit reverses nothing.
ALTER TABLE mt5_credits DROP CONSTRAINT mt5_credits_check1;
ALTER TABLE mt5_credits ADD CONSTRAINT mt5_credits_debit_reverses
  CHECK ((kind = 'debit' AND debit_reason <> 'withdrawal') = (original_credit_id IS NOT NULL));
ALTER TABLE mt5_credits ADD CONSTRAINT mt5_credits_withdrawal_rows
  CHECK ((withdrawal_id IS NOT NULL) = (debit_reason = 'withdrawal' OR credit_reason = 'withdrawal_return'));

-- One automatic credit per deposit intent still; give-back credits name the deposit whose card the
-- payout went to, and are unique by their own business key (withdrawal-return:<id>).
DROP INDEX mt5_credits_one_credit_per_deposit;
CREATE UNIQUE INDEX mt5_credits_one_credit_per_deposit ON mt5_credits (deposit_reference)
  WHERE kind = 'credit' AND repair_id IS NULL AND credit_reason = 'deposit';
CREATE INDEX mt5_credits_destinations ON mt5_credits (customer_id, payment_method_token)
  WHERE kind = 'credit' AND status = 'done' AND payment_method_token IS NOT NULL;

CREATE TABLE withdrawals (
  withdrawal_id          text        PRIMARY KEY CHECK (withdrawal_id ~ '^wd_[0-9a-f]{32}$'),
  merchant_id            text        NOT NULL,
  customer_id            text        NOT NULL,
  mt5_login              bigint      NOT NULL REFERENCES mt5_accounts (mt5_login),
  amount_minor           bigint      NOT NULL CHECK (amount_minor > 0),
  currency               char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  destination_token      text        NOT NULL,
  source_credit_id       bigint      NOT NULL REFERENCES mt5_credits (id),  -- the deposit paid from it
  source_payment_id      text        NOT NULL,
  deposit_reference      text        NOT NULL REFERENCES deposit_intents (deposit_reference),
  provider               text        NOT NULL,
  idempotency_key        text        NOT NULL,
  request_digest         text        NOT NULL,  -- the caller's request (idempotency)
  command_digest         text        NOT NULL,  -- the exact withdrawal an approval is bound to
  -- held -> prepared -> approved (its MT5 debit row exists) -> paid_out -> paid | returning -> returned;
  -- rejected (an operator), refused (MT5 refused the debit)
  status                 text        NOT NULL CHECK (status IN ('held', 'prepared', 'approved',
                           'paid_out', 'paid', 'returning', 'returned', 'rejected', 'refused')),
  approval_required      boolean     NOT NULL,
  margin_free_at_request numeric     NOT NULL,
  prepared_by            text,
  prepared_at            timestamptz,
  approved_by            text,
  approved_at            timestamptz,
  debit_id               bigint      UNIQUE REFERENCES mt5_credits (id),
  return_id              bigint      UNIQUE REFERENCES mt5_credits (id),
  payout_failure         text,
  last_reason            text,
  created_at             timestamptz NOT NULL DEFAULT now(),
  updated_at             timestamptz NOT NULL DEFAULT now(),
  UNIQUE (merchant_id, idempotency_key),
  -- maker-checker in the database too: whoever prepared it never approves it
  CHECK (approved_by IS NULL OR approved_by <> 'auto' OR NOT approval_required),
  CHECK (approved_by IS NULL OR prepared_by IS NULL OR approved_by <> prepared_by),
  CHECK (status NOT IN ('approved', 'paid_out', 'paid', 'returning', 'returned')
         OR approved_by IS NOT NULL)
);
-- The held amounts of a login (requested, not yet debited, not rejected or refused).
CREATE INDEX withdrawals_held ON withdrawals (mt5_login) WHERE status IN ('held', 'prepared', 'approved');
CREATE INDEX withdrawals_status ON withdrawals (status, created_at);

-- Every act on a withdrawal, by whom and why (append-only: no UPDATE or DELETE is ever issued).
CREATE TABLE withdrawal_audit (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  withdrawal_id  text        NOT NULL,
  actor          text        NOT NULL,
  action         text        NOT NULL,
  outcome        text        NOT NULL CHECK (outcome IN ('done', 'refused')),
  reason         text,
  at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX withdrawal_audit_withdrawal ON withdrawal_audit (withdrawal_id, id);
