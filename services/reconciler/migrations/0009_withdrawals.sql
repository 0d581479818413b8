-- Withdrawals (ADR 0008): the reconciler learns payouts.
-- * money_facts: a withdrawal's payout paid (kind 'payout', source key payout:<withdrawal_id>) and
--   returned ('payout_return', payout-return:<withdrawal_id>), provider_object_id = the PSP's payout id;
-- * settlement_rows: the PSP's 'payout' (gross < 0) and 'payout_return' (gross > 0) rows, whose
--   payment_intent_id is empty ('': the column keeps the report's text, as the checked parser and
--   the bulk path both store it);
-- * mt5_operations.withdrawal_id: the withdrawal a debit (wdr:<id>) or give-back credit (wbk:<id>)
--   belongs to; NULL for deposits' credits and debits. A give-back credit pays no capture, so the
--   capture <-> credit layer leaves it out. Adding a nullable column rewrites nothing.
-- * two partial indexes, holding only withdrawals' rows (few beside a day's deposits), for the run's
--   check that a paid payout has its MT5 debit and a returned one its give-back credit: the check
--   reads the date's payout facts and probes their withdrawal's operations, never the whole day.
ALTER TABLE money_facts DROP CONSTRAINT money_facts_kind_check;
ALTER TABLE money_facts ADD CONSTRAINT money_facts_kind_check
  CHECK (kind IN ('capture', 'refund', 'chargeback', 'payout', 'payout_return'));

ALTER TABLE settlement_rows DROP CONSTRAINT settlement_rows_type_check;
ALTER TABLE settlement_rows ADD CONSTRAINT settlement_rows_type_check
  CHECK (type IN ('charge', 'refund', 'dispute', 'payout', 'payout_return'));

ALTER TABLE mt5_operations ADD COLUMN withdrawal_id text;
CREATE INDEX mt5_operations_withdrawal ON mt5_operations (withdrawal_id) WHERE withdrawal_id IS NOT NULL;
CREATE INDEX money_facts_payouts ON money_facts (business_date) WHERE kind IN ('payout', 'payout_return');
