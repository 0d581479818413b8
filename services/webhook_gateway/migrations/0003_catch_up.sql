-- The catch-up of webhooks that never came (application/catch_up.py): the gateway lists the PSP's
-- events through its authenticated API and stores each one it has no receipt of, like a webhook.
-- Such a receipt has no signature: signature_result 'fetched', signature_secret 'api' (the
-- authenticity of the API call), signature_timestamp_s the event's creation time.
ALTER TABLE provider_events
    DROP CONSTRAINT provider_events_signature_result_check,
    DROP CONSTRAINT provider_events_signature_secret_check,
    ADD CONSTRAINT provider_events_signature_result_check
        CHECK (signature_result IN ('verified', 'fetched')),
    ADD CONSTRAINT provider_events_signature_secret_check
        CHECK ((signature_result = 'verified' AND signature_secret IN ('current', 'previous'))
            OR (signature_result = 'fetched' AND signature_secret = 'api'));

-- How far each provider's events are caught up: every event created up to caught_up_to_s (Unix
-- seconds, the PSP's clock) has been read and has a receipt. The next pass reads from a little
-- before it (CATCH_UP_OVERLAP_S), so an event that became visible late is not skipped.
CREATE TABLE catch_up_cursors (
    provider       text        PRIMARY KEY,
    caught_up_to_s bigint      NOT NULL CHECK (caught_up_to_s >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
