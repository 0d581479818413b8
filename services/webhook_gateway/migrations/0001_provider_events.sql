-- Webhook receipts: one row per unique (provider, provider_event_id), written in the same statement
-- as its ProviderEventReceived outbox row. Only webhooks whose signature verified are stored.
-- Receipts are audit records: the gateway never updates them (a trigger refuses UPDATE).
CREATE SEQUENCE provider_events_id_seq AS bigint;

CREATE TABLE provider_events (
    -- Allocated by the gateway (nextval) before the insert: the id travels inside the outbox event.
    id                    bigint      PRIMARY KEY,
    provider              text        NOT NULL,
    provider_event_id     text        NOT NULL,
    provider_event_type   text        NOT NULL,
    provider_payment_id   text,                       -- NULL: the event names no payment
    raw_body              bytea       NOT NULL,       -- the exact bytes the signature was verified over
    body_sha256           bytea       NOT NULL,       -- tells a redelivery apart from a changed body
    audit_headers         jsonb       NOT NULL,       -- allow-listed request headers, never secrets
    signature_result      text        NOT NULL,
    signature_secret      text        NOT NULL,       -- which secret verified: rotation progress
    signature_timestamp_s bigint      NOT NULL,       -- the t= of the signature header
    request_id            text        NOT NULL,
    outbox_event_id       uuid        NOT NULL UNIQUE,
    received_at           timestamptz NOT NULL,       -- the database's now() at receipt
    CONSTRAINT provider_events_unique_event UNIQUE (provider, provider_event_id),
    CHECK (signature_result = 'verified'),
    CHECK (signature_secret IN ('current', 'previous')),
    CHECK (provider <> '' AND length(provider) <= 64),
    CHECK (provider_event_id <> '' AND length(provider_event_id) <= 255),
    CHECK (provider_event_type <> '' AND length(provider_event_type) <= 255),
    CHECK (provider_payment_id IS NULL OR (provider_payment_id <> '' AND length(provider_payment_id) <= 255)),
    CHECK (octet_length(body_sha256) = 32)
);
ALTER SEQUENCE provider_events_id_seq OWNED BY provider_events.id;

-- Operators look receipts up by the PSP's payment id (all webhooks of one payment).
CREATE INDEX provider_events_payment_idx ON provider_events (provider, provider_payment_id)
    WHERE provider_payment_id IS NOT NULL;

CREATE FUNCTION provider_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'provider_events rows are immutable audit records';
END;
$$;

CREATE TRIGGER provider_events_no_update BEFORE UPDATE ON provider_events
    FOR EACH ROW EXECUTE FUNCTION provider_events_immutable();
