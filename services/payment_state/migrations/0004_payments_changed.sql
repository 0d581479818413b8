-- Wake the API's waiting status reads (backbone.changes: `If-None-Match` + `Prefer: wait`) when a
-- payment changes. Every change of the aggregate bumps `version`, so that is what is announced; the
-- payload is the payment id, and the API wakes only the requests waiting on it. NOTIFY is delivered
-- at commit, and duplicates within one transaction are delivered once. A change of an operation
-- alone (an attempt counted) wakes nobody: a waiting read sees it when its wait ends.
CREATE FUNCTION payments_changed_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('payment_state_payments', NEW.payment_id);
    RETURN NULL;
END;
$$;
CREATE TRIGGER payments_changed_notify AFTER UPDATE OF version ON payments
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION payments_changed_notify();
