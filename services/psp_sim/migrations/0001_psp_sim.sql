-- The simulated PSP's own state: payment intents, refunds, disputes, balance transactions (the source of
-- the settlement report), idempotency records, signed webhook events with their durable delivery queue,
-- report discrepancies to inject, and the persisted part of the control configuration.

CREATE TABLE payment_intents (
    id                          text        PRIMARY KEY,
    reference                   text,
    status                      text        NOT NULL CHECK (status IN (
                                    'requires_payment_method', 'requires_confirmation', 'requires_action',
                                    'requires_capture', 'succeeded', 'canceled')),
    amount_minor                bigint      NOT NULL CHECK (amount_minor > 0),
    amount_capturable_minor     bigint      NOT NULL DEFAULT 0 CHECK (amount_capturable_minor >= 0),
    amount_received_minor       bigint      NOT NULL DEFAULT 0 CHECK (amount_received_minor >= 0),
    amount_refunded_minor       bigint      NOT NULL DEFAULT 0 CHECK (amount_refunded_minor >= 0),
    amount_refund_pending_minor bigint      NOT NULL DEFAULT 0 CHECK (amount_refund_pending_minor >= 0),
    amount_disputed_minor       bigint      NOT NULL DEFAULT 0 CHECK (amount_disputed_minor >= 0),
    currency                    text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    capture_method              text        NOT NULL CHECK (capture_method IN ('manual', 'automatic')),
    payment_method              text,
    metadata                    jsonb       NOT NULL DEFAULT '{}',
    last_payment_error          jsonb,
    next_action                 jsonb,
    cancellation_reason         text,
    latest_charge               text,
    created_s                   bigint      NOT NULL,
    canceled_s                  bigint,
    captured_s                  bigint,
    CHECK (amount_capturable_minor <= amount_minor),
    CHECK (amount_received_minor <= amount_minor),
    CHECK (amount_refunded_minor + amount_refund_pending_minor <= amount_received_minor),
    CHECK (amount_disputed_minor <= amount_received_minor)
);
CREATE INDEX payment_intents_reference ON payment_intents (reference) WHERE reference IS NOT NULL;

CREATE TABLE refunds (
    id                text        PRIMARY KEY,
    payment_intent_id text        NOT NULL REFERENCES payment_intents (id),
    reference         text,
    amount_minor      bigint      NOT NULL CHECK (amount_minor > 0),
    currency          text        NOT NULL,
    status            text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    reason            text,
    failure_reason    text,
    metadata          jsonb       NOT NULL DEFAULT '{}',
    created_s         bigint      NOT NULL
);
CREATE INDEX refunds_payment_intent ON refunds (payment_intent_id);
CREATE INDEX refunds_reference ON refunds (reference) WHERE reference IS NOT NULL;

CREATE TABLE disputes (
    id                text        PRIMARY KEY,
    payment_intent_id text        NOT NULL REFERENCES payment_intents (id),
    amount_minor      bigint      NOT NULL CHECK (amount_minor > 0),
    currency          text        NOT NULL,
    reason            text        NOT NULL,
    status            text        NOT NULL,
    created_s         bigint      NOT NULL
);

-- One row per money movement on the PSP's balance: the settlement report is derived from these, never
-- edited. net = gross - fee always; one row per (type, source object).
CREATE TABLE balance_transactions (
    id                text        PRIMARY KEY,
    type              text        NOT NULL CHECK (type IN ('charge', 'refund', 'dispute')),
    source_id         text        NOT NULL,
    payment_intent_id text        NOT NULL REFERENCES payment_intents (id),
    reference         text,
    source_reference  text,
    currency          text        NOT NULL,
    gross_minor       bigint      NOT NULL,
    fee_minor         bigint      NOT NULL CHECK (fee_minor >= 0),
    net_minor         bigint      NOT NULL,
    business_date     date        NOT NULL,
    created_s         bigint      NOT NULL,
    seq               bigserial   NOT NULL,
    UNIQUE (type, source_id),
    CHECK (net_minor = gross_minor - fee_minor)
);
CREATE INDEX balance_transactions_date ON balance_transactions (business_date, currency, seq);
CREATE INDEX balance_transactions_intent ON balance_transactions (payment_intent_id);

-- Idempotency: the key, a digest of (method, path, body) and the exact response, written in the same
-- transaction as the effect. A replay returns response_status/response_body byte for byte.
CREATE TABLE idempotency_keys (
    idem_key        text        PRIMARY KEY,
    request_digest  bytea       NOT NULL,
    response_status integer     NOT NULL,
    response_body   bytea       NOT NULL,
    created_ms      bigint      NOT NULL,
    expires_ms      bigint      NOT NULL
);

-- A webhook event: its exact body is fixed at creation, so every copy and retry sends the same bytes.
CREATE TABLE webhook_events (
    id         text        PRIMARY KEY,
    type       text        NOT NULL,
    object_id  text        NOT NULL,
    intent_id  text        NOT NULL,
    reference  text,
    body       bytea       NOT NULL,
    created_s  bigint      NOT NULL
);
CREATE INDEX webhook_events_intent ON webhook_events (intent_id);

-- The durable delivery queue: one row per copy of an event to send (duplicates are extra rows).
-- pending -> delivered | failed (attempts exhausted); held (reorder fault) -> pending; dropped is final.
CREATE TABLE webhook_deliveries (
    id              bigserial   PRIMARY KEY,
    event_id        text        NOT NULL REFERENCES webhook_events (id),
    state           text        NOT NULL CHECK (state IN ('pending', 'held', 'delivered', 'failed', 'dropped')),
    signing         text        NOT NULL DEFAULT 'valid' CHECK (signing IN ('valid', 'wrong_secret', 'expired')),
    signing_age_s   integer     NOT NULL DEFAULT 0,
    next_attempt_ms bigint      NOT NULL,
    order_key       bigint      NOT NULL DEFAULT 0,
    lease_until_ms  bigint      NOT NULL DEFAULT 0,
    hold_group      text,
    attempts        integer     NOT NULL DEFAULT 0,
    created_s       bigint      NOT NULL,
    delivered_s     bigint,
    last_error      text
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms, order_key) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_held ON webhook_deliveries (hold_group) WHERE state = 'held';

CREATE TABLE webhook_attempts (
    delivery_id bigint      NOT NULL REFERENCES webhook_deliveries (id),
    attempt_no  integer     NOT NULL,
    url         text        NOT NULL,
    started_ms  bigint      NOT NULL,
    duration_ms integer     NOT NULL,
    status_code integer,
    error       text,
    PRIMARY KEY (delivery_id, attempt_no)
);

-- Report discrepancies injected by the control API (for the reconciler's tests).
CREATE TABLE report_discrepancies (
    id                 bigserial PRIMARY KEY,
    business_date      date      NOT NULL,
    kind               text      NOT NULL CHECK (kind IN ('missing_row', 'wrong_amount', 'extra_row')),
    reference          text,
    amount_delta_minor bigint    NOT NULL DEFAULT 0,
    currency           text,
    created_s          bigint    NOT NULL
);

-- Control configuration that must survive a restart (webhook URL, secrets, TTLs, retry policy).
CREATE TABLE sim_config (
    key   text  PRIMARY KEY,
    value jsonb NOT NULL
);
