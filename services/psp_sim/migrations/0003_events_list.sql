-- GET /v1/events (Stripe's events list: newest first, paged with starting_after, filtered by
-- created[gte]/created[lte]): a merchant that missed a webhook catches up by listing events.
CREATE INDEX webhook_events_created ON webhook_events (created_s DESC, id DESC);
