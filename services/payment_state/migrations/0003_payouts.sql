-- Payouts of withdrawals (ADR 0008, step 5): money out of our PSP balance to the client's card,
-- after mt5-credit took it off MT5. One payout per withdrawal, whatever the number of commands.
--
-- The payout's operation has its own table rather than a row of `payment_operations`: that table's
-- rows belong to a payment (a NOT NULL foreign key, a CHECK on the operation types, the payment's
-- `version` guards every change of them), and a payout belongs to a withdrawal, not to a payment.
-- The claim/lease/call-in-flight/unknown columns and their rules are the same, column for column.

-- One payout per withdrawal (the command's idempotency key is the withdrawal id). `request_digest`
-- is the SHA-256 of the normalized command: the same id with another request is a conflict.
CREATE TABLE payouts (
    withdrawal_id       text        PRIMARY KEY,
    merchant_id         text        NOT NULL,
    provider            text        NOT NULL,
    amount_minor        bigint      NOT NULL CHECK (amount_minor > 0),
    currency            text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    destination_token   text        NOT NULL,
    source_payment_id   text        NOT NULL,
    mt5_login           bigint      NOT NULL,
    mt5_debit_id        bigint      NOT NULL,
    request_digest      text        NOT NULL,
    -- PENDING: not known to the PSP yet; SUBMITTED: the PSP has it, no outcome yet; PAID, FAILED
    -- (definite proof only), RETURNED (after PAID).
    status              text        NOT NULL CHECK (status IN ('PENDING', 'SUBMITTED', 'PAID', 'FAILED', 'RETURNED')),
    provider_payout_id  text,
    failure_code        text,
    failure_message     text,
    version             bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (status IN ('PENDING', 'FAILED') OR provider_payout_id IS NOT NULL)
);
CREATE UNIQUE INDEX payouts_provider_payout_idx ON payouts (provider, provider_payout_id)
    WHERE provider_payout_id IS NOT NULL;

-- The one attempt at paying it out. Its id is the PSP's Idempotency-Key on every send.
CREATE TABLE payout_operations (
    operation_id    text        PRIMARY KEY,
    withdrawal_id   text        NOT NULL UNIQUE REFERENCES payouts (withdrawal_id),
    status          text        NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    provider        text        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),  -- calls + lookups made
    -- True from just before the create until its answer is recorded (see payment_operations).
    call_in_flight  boolean     NOT NULL DEFAULT false,
    claimed_by      text,
    claimed_until   timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    unknown_reason  text,
    unknown_since   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    CHECK ((status IN ('SUCCEEDED', 'FAILED')) = (resolved_at IS NOT NULL))
);
CREATE INDEX payout_operations_due_idx ON payout_operations (next_attempt_at)
    WHERE status IN ('PENDING', 'UNKNOWN');

-- Wake the worker when a payout operation is created (the channel it listens on already).
CREATE TRIGGER payout_operations_notify AFTER INSERT ON payout_operations
    FOR EACH STATEMENT EXECUTE FUNCTION payment_operations_notify();
