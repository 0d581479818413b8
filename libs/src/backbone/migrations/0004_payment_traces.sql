-- Each payment's trace in this service (ADR 0012): the W3C traceparent of the first work this service
-- did for the payment (its creation, or the first event consumed for it). Later work for the payment
-- (a webhook's event, a worker's PSP or MT5 call) continues this trace, so one deposit is one trace
-- even where a new request (a PSP webhook) starts a new one. Written once, never updated.
CREATE TABLE payment_traces (
    payment_id  text        PRIMARY KEY,
    traceparent text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$')
);
