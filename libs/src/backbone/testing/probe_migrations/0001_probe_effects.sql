-- The probe service's only effect: one row per application of an event. There is deliberately NO
-- unique constraint: if the backbone ever applied an event twice, tests would see two rows.
CREATE TABLE probe_effects (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL,
    payment_id      text        NOT NULL,
    seq             bigint      NOT NULL,
    consumer        text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    occurred_at_ms  bigint      NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
