-- Migration 0001 announced every status change of a credit row on 'mt5_credits_pending', and no
-- worker listened. The workers listen now (entrypoints/worker.py), so only what gives them work
-- is announced: a row that is, or becomes, pending (a new credit or debit, an approved withdrawal's
-- debit, a row an absent lookup sends back). A claim or an outcome wakes nobody. Duplicate
-- notifications of one transaction are delivered once, so a batch of rows is one wake-up.
DROP TRIGGER mt5_credits_pending_notify ON mt5_credits;
CREATE TRIGGER mt5_credits_pending_notify
  AFTER INSERT OR UPDATE OF status ON mt5_credits
  FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION mt5_credits_notify();
