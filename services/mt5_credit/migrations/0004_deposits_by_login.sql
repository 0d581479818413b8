-- Operators find a login's deposits (the console's search by MT5 login): newest first.
CREATE INDEX deposit_intents_login ON deposit_intents (mt5_login, created_at DESC);
