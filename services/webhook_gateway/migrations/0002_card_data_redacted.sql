-- Card data in a verified webhook (ADR 0004): such a body is stored redacted, never as signed.
-- raw_body then holds the redacted rendition, body_sha256 its digest, and audit_headers no
-- signature header (a MAC of bytes no longer kept); this flag says which receipts these are.
ALTER TABLE provider_events ADD COLUMN card_data_redacted boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN provider_events.raw_body IS
    'The exact bytes the signature was verified over; when card_data_redacted, their redacted rendition (ADR 0004)';
COMMENT ON COLUMN provider_events.card_data_redacted IS
    'The body as signed carried card data and was redacted before anything was stored';
