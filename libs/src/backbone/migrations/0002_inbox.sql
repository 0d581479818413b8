-- Idempotent consumer: one row per (consumer, event_id) applied, written in the same transaction as
-- the effects. A redelivered event conflicts here and is skipped.
CREATE TABLE processed_events (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX processed_events_processed_at_idx ON processed_events (processed_at);

-- Failed attempts of one message, counted outside the failed transaction so that a message that
-- keeps failing (even one that crashes the process) is dead-lettered after N attempts.
CREATE TABLE consumer_attempts (
    consumer     text        NOT NULL,
    topic        text        NOT NULL,
    kafka_partition integer  NOT NULL,
    kafka_offset bigint      NOT NULL,
    attempts     integer     NOT NULL,
    last_error   text        NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, kafka_partition, kafka_offset)
);

-- Messages a consumer could not apply: visible to operators, replayable by command. The partition
-- moves on; nothing disappears silently.
CREATE TABLE dead_letters (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer         text        NOT NULL,
    topic            text        NOT NULL,
    kafka_partition  integer     NOT NULL,
    kafka_offset     bigint      NOT NULL,
    message_key      bytea,
    payload          bytea,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    event_id         uuid,
    event_type       text,
    error_class      text        NOT NULL,      -- undecodable | unknown_schema | invalid_envelope | handler_failed
    reason           text        NOT NULL,
    attempts         integer     NOT NULL,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    -- An operator closes a dead letter by replaying it through the consumer's handler or by
    -- discarding it; either way who, when and why are kept.
    resolution       text CHECK (resolution IN ('replayed', 'discarded')),
    resolved_at      timestamptz,
    resolved_by      text,
    resolution_note  text,
    CHECK ((resolution IS NULL) = (resolved_at IS NULL)),
    UNIQUE (consumer, topic, kafka_partition, kafka_offset)
);
CREATE INDEX dead_letters_open_idx ON dead_letters (consumer, id) WHERE resolution IS NULL;
