-- The API's negative-balance gauge (ledger_negative_balance_accounts) counts accounts below zero
-- every few seconds; this partial index is empty while the books are healthy, so the count costs
-- nothing however many per-login accounts exist.
CREATE INDEX balances_negative_idx ON balances (account_id) WHERE balance_minor < 0;
