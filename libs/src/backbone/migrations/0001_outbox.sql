-- Transactional outbox: rows written in the same transaction as the business change they announce.
-- The relay publishes unpublished rows in id order and marks them after Kafka's delivery report.
CREATE TABLE outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    event_type   text        NOT NULL,
    topic        text        NOT NULL,
    message_key  text        NOT NULL,          -- the payment_id: Kafka key, so per-payment order holds
    payload      bytea       NOT NULL,          -- Avro single-object encoded event (or a dead letter's raw bytes)
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    published_at timestamptz,
    CHECK (message_key <> '')
);

-- The relay's claim query reads this small partial index only.
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
-- Pruning of old published rows.
CREATE INDEX outbox_published_at_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Wake the relay at commit (NOTIFY is delivered only if the transaction commits). One notification
-- per statement is enough: the relay reads everything unpublished when it wakes.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('backbone_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
