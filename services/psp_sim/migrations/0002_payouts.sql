-- Payouts: money out of our PSP balance to a payment method token (a withdrawal on our side). Their
-- balance transactions (payout, payout_return) have no payment intent.

CREATE TABLE payouts (
    id                  text    PRIMARY KEY,
    reference           text    NOT NULL,
    status              text    NOT NULL CHECK (status IN ('pending', 'paid', 'failed', 'returned')),
    amount_minor        bigint  NOT NULL CHECK (amount_minor > 0),
    currency            text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    destination         text    NOT NULL,
    metadata            jsonb   NOT NULL DEFAULT '{}',
    created_s           bigint  NOT NULL,
    settle_at_ms        bigint  NOT NULL,
    forced_failure_code text,
    failure_code        text,
    failure_message     text,
    paid_s              bigint,
    failed_s            bigint,
    returned_s          bigint,
    CHECK ((status IN ('failed', 'returned')) = (failure_code IS NOT NULL))
);
CREATE INDEX payouts_reference ON payouts (reference);
CREATE INDEX payouts_due ON payouts (settle_at_ms) WHERE status = 'pending';

ALTER TABLE balance_transactions ALTER COLUMN payment_intent_id DROP NOT NULL;
ALTER TABLE balance_transactions DROP CONSTRAINT balance_transactions_type_check;
ALTER TABLE balance_transactions ADD CONSTRAINT balance_transactions_type_check
    CHECK (type IN ('charge', 'refund', 'dispute', 'payout', 'payout_return'));
ALTER TABLE balance_transactions ADD CONSTRAINT balance_transactions_intent_unless_payout
    CHECK ((payment_intent_id IS NULL) = (type IN ('payout', 'payout_return')));
