-- Withdrawals (ADR 0008, "Books"): money taken off a client's MT5 account and not yet out of our PSP
-- balance (debited, payout not yet paid), or back at the PSP and not yet on MT5 again (payout failed
-- or returned, give-back credit not yet done). A liability, one account per currency, no floor: it
-- comes back to zero for every withdrawal once its last fact is booked.
INSERT INTO account_codes (code, account_type, per_holder, floor_minor, description) VALUES
  ('payouts_in_transit',      'liability', false, NULL, 'Withdrawn client money between MT5 and the PSP payout, either way');
