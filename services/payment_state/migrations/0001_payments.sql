-- payment-state's own tables (the backbone's outbox and dedup tables are applied before these).
--
-- The database enforces the money invariants the domain also checks, so that a bug in one code
-- path cannot store an impossible payment: amounts are positive bigints of minor units, captured
-- never exceeds authorized, confirmed plus in-flight refunds never exceed captured.

-- One payment intent of a merchant: the aggregate. Every change bumps `version`; writers update
-- with `WHERE version = <the version they read>`, so two decisions taken on the same version (a
-- capture racing a cancel, two refunds for the same capacity) cannot both commit.
CREATE TABLE payments (
    payment_id            text        PRIMARY KEY,
    merchant_id           text        NOT NULL,
    amount_minor          bigint      NOT NULL CHECK (amount_minor > 0),
    currency              text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    capture_method        text        NOT NULL CHECK (capture_method IN ('manual', 'automatic')),
    payment_method_token  text        NOT NULL,
    deposit_reference     text,
    provider              text        NOT NULL,
    status                text        NOT NULL CHECK (status IN ('CREATED', 'REQUIRES_ACTION', 'AUTHORIZED',
                              'CAPTURED', 'PARTIALLY_REFUNDED', 'REFUNDED', 'FAILED', 'CANCELED')),
    provider_payment_id   text,
    authorized_minor      bigint      NOT NULL DEFAULT 0 CHECK (authorized_minor >= 0),
    captured_minor        bigint      NOT NULL DEFAULT 0 CHECK (captured_minor >= 0),
    refunded_minor        bigint      NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0),
    pending_refund_minor  bigint      NOT NULL DEFAULT 0 CHECK (pending_refund_minor >= 0),
    -- The capture or cancel in flight: at most one, so capture and cancel exclude each other.
    active_operation_id   text,
    next_action_url       text,
    failure_code          text,
    failure_message       text,
    version               bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK (authorized_minor <= amount_minor),
    CHECK (captured_minor <= authorized_minor),
    CHECK (refunded_minor + pending_refund_minor <= captured_minor)
);
CREATE UNIQUE INDEX payments_provider_payment_idx ON payments (provider, provider_payment_id)
    WHERE provider_payment_id IS NOT NULL;

-- One attempt at moving money at the provider. The operation id is the provider idempotency key;
-- an operation is never re-created, only re-sent with the same id or resolved by a lookup.
CREATE TABLE payment_operations (
    operation_id        text        PRIMARY KEY,
    payment_id          text        NOT NULL REFERENCES payments (payment_id),
    operation_type      text        NOT NULL CHECK (operation_type IN ('authorize', 'capture', 'cancel', 'refund')),
    refund_id           text        UNIQUE,
    amount_minor        bigint      NOT NULL CHECK (amount_minor >= 0),
    currency            text        NOT NULL,
    status              text        NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    provider            text        NOT NULL,
    provider_reference  text,       -- the provider's id of what this operation made (payment intent, refund)
    reason              text,       -- the caller's reason (cancel, refund)
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),  -- calls + lookups made
    -- True from just before a call to the provider until its answer is recorded: a claim that
    -- expires with this set means a worker died mid-call, so the outcome is UNKNOWN (never PENDING).
    call_in_flight      boolean     NOT NULL DEFAULT false,
    claimed_by          text,
    claimed_until       timestamptz,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    unknown_reason      text,
    unknown_since       timestamptz,
    failure_code        text,
    failure_message     text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    resolved_at         timestamptz,
    CHECK ((operation_type = 'refund') = (refund_id IS NOT NULL)),
    CHECK ((status IN ('SUCCEEDED', 'FAILED')) = (resolved_at IS NOT NULL)),
    CHECK (operation_type = 'cancel' OR amount_minor > 0)
);
CREATE INDEX payment_operations_payment_idx ON payment_operations (payment_id);
-- The executor's claim reads this partial index only: operations still waiting for an outcome.
CREATE INDEX payment_operations_due_idx ON payment_operations (next_attempt_at)
    WHERE status IN ('PENDING', 'UNKNOWN');
CREATE UNIQUE INDEX payment_operations_provider_ref_idx ON payment_operations (provider, provider_reference)
    WHERE provider_reference IS NOT NULL AND operation_type = 'refund';

-- Wake the executor when an operation is created (NOTIFY is delivered at commit).
CREATE FUNCTION payment_operations_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('payment_state_operations', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER payment_operations_notify AFTER INSERT ON payment_operations
    FOR EACH STATEMENT EXECUTE FUNCTION payment_operations_notify();

-- Caller idempotency: one row per (merchant, operation type, key). The digest of the normalized
-- request tells a replay (same digest: answer `response_*`) from a reused key (a conflict). The
-- row is written in the same transaction as the effects, so a concurrent request with the same key
-- waits on the unique index until the first one commits and then replays its answer.
CREATE TABLE idempotency_keys (
    merchant_id      text        NOT NULL,
    operation_type   text        NOT NULL CHECK (operation_type IN ('create', 'capture', 'cancel', 'refund')),
    idempotency_key  text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_digest   text        NOT NULL,
    payment_id       text,
    response_status  integer,
    response_body    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, operation_type, idempotency_key)
);

-- Every provider fact seen (synchronous answer, webhook, lookup) and what it did: kept for audit
-- even when stale or a duplicate. A webhook's provider event id is unique: a second delivery of
-- the same provider event (another envelope, same webhook) changes nothing.
CREATE TABLE provider_facts (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider            text        NOT NULL,
    provider_event_id   text,
    source              text        NOT NULL CHECK (source IN ('response', 'webhook', 'lookup')),
    fact_type           text        NOT NULL,
    payment_id          text,
    operation_id        text,
    outcome             text        NOT NULL CHECK (outcome IN ('applied', 'stale', 'duplicate', 'pending',
                            'conflict', 'unmatched', 'ignored')),
    detail              text,
    causation_id        text,
    received_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX provider_facts_event_idx ON provider_facts (provider, provider_event_id)
    WHERE provider_event_id IS NOT NULL;
CREATE INDEX provider_facts_payment_idx ON provider_facts (payment_id);

-- Chargebacks (disputes) reported by the provider: one per provider dispute.
CREATE TABLE chargebacks (
    chargeback_id        text        PRIMARY KEY,
    payment_id           text        NOT NULL REFERENCES payments (payment_id),
    provider             text        NOT NULL,
    provider_dispute_id  text        NOT NULL,
    amount_minor         bigint      NOT NULL CHECK (amount_minor > 0),
    currency             text        NOT NULL,
    reason               text,
    received_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, provider_dispute_id)
);

-- Cases for a person: an outcome the system could not establish by itself (unknown after the
-- retry limit, the provider's idempotency window passed, the provider contradicting our records).
CREATE TABLE payment_cases (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id    text        NOT NULL,
    operation_id  text        NOT NULL DEFAULT '',
    kind          text        NOT NULL,
    detail        text        NOT NULL,
    opened_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at   timestamptz,
    resolved_by   text,
    UNIQUE (payment_id, operation_id, kind)
);
CREATE INDEX payment_cases_open_idx ON payment_cases (opened_at) WHERE resolved_at IS NULL;
