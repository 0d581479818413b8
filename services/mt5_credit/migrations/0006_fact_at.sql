-- When the money fact a row carries out happened at its source (the envelope's occurred_at of the
-- PaymentCaptured for a deposit's credit, of the RefundSucceeded or ChargebackReceived for a debit):
-- the worker measures fact -> done from it (mt5_credit_fact_to_done_seconds, the seed's
-- capture-to-credit time). NULL for rows no such event made (repairs, withdrawals' debits and
-- give-backs, rows from before this migration).
ALTER TABLE mt5_credits ADD COLUMN fact_at timestamptz;
