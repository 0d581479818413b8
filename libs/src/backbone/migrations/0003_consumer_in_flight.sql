-- The range of offsets a consumer is applying right now, per partition. Written (asynchronously
-- committed) before a batch, deleted inside the batch's transaction. A row that survives means a
-- process died mid-batch: the next owner applies exactly that range message by message, counting
-- attempts, so a message that kills the process is dead-lettered after N crashes.
CREATE TABLE consumer_in_flight (
    consumer        text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    first_offset    bigint      NOT NULL,
    last_offset     bigint      NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, kafka_partition),
    CHECK (first_offset <= last_offset)
);
