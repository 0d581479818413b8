-- Repairs the reconciler sends payment-state (ExecuteRepair, target 'payment_state'), after two
-- different people proposed and approved them: one row per repair id, whatever the number of
-- deliveries or event ids it arrived under.
--
-- The consumer records the request (its transaction calls no one); the worker claims it like an
-- operation (lease, next attempt), looks the object up at the PSP outside any transaction, then,
-- in one transaction, applies what the PSP answered and decides the repair: `requested` moves to
-- `executed`, `refused` or `unknown` exactly once, and its RepairOutcome goes to the outbox in
-- that same transaction. A decided row never changes again.
CREATE TABLE repair_requests (
    repair_id         bigint      PRIMARY KEY,
    case_id           bigint      NOT NULL,
    repair_type       text        NOT NULL,
    source_key        text        NOT NULL,
    -- The command's key. Not a foreign key: a repair may name a payment we do not have (refused).
    payment_id        text        NOT NULL,
    requested_by      text        NOT NULL,
    approved_by       text        NOT NULL,
    amount_minor      bigint,
    currency          text,
    reason            text        NOT NULL,
    fact_type         text,
    fact_json         text,
    command_digest    text        NOT NULL,
    command_event_id  text        NOT NULL,   -- the first delivery's event id (the outcome's cause)
    status            text        NOT NULL DEFAULT 'requested'
                          CHECK (status IN ('requested', 'executed', 'refused', 'unknown')),
    detail            text,
    reference         text,
    attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),   -- PSP lookups made
    claimed_by        text,
    claimed_until     timestamptz,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    received_at       timestamptz NOT NULL DEFAULT now(),
    decided_at        timestamptz,
    CHECK ((status = 'requested') = (decided_at IS NULL)),
    CHECK ((status = 'requested') = (detail IS NULL))
);
-- The worker's claim reads this partial index only: repairs still waiting for their lookup.
CREATE INDEX repair_requests_due_idx ON repair_requests (next_attempt_at) WHERE status = 'requested';

-- Wake the worker when a repair is recorded (the channel it already listens on for operations).
CREATE TRIGGER repair_requests_notify AFTER INSERT ON repair_requests
    FOR EACH STATEMENT EXECUTE FUNCTION payment_operations_notify();
