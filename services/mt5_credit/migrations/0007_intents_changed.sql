-- Wake the API's waiting reads of a deposit intent (backbone.changes: `If-None-Match` + `Prefer:
-- wait`, the broker waiting for its credit) when one of its credit rows appears or reaches an
-- outcome. The payload is the deposit reference. A claim ('claimed') and a row sent back to
-- 'pending' are internal and wake nobody: a waiting read sees them when its wait ends. NOTIFY is
-- delivered at commit, and duplicates within one transaction are delivered once.
CREATE FUNCTION mt5_credits_intent_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('mt5_credit_intents', NEW.deposit_reference);
  RETURN NULL;
END;
$$;
CREATE TRIGGER mt5_credits_intent_created AFTER INSERT ON mt5_credits
  FOR EACH ROW EXECUTE FUNCTION mt5_credits_intent_notify();
CREATE TRIGGER mt5_credits_intent_outcome AFTER UPDATE OF status ON mt5_credits
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('done', 'failed', 'unknown'))
  EXECUTE FUNCTION mt5_credits_intent_notify();
