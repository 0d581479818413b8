-- The merchant of a case (issue 34, ADR 0011): an operator limited to merchants sees and acts on
-- their cases only. It is derived from the records the case's evidence names, by the rule of
-- reconciler.domain.merchants (which PgReconStore.apply_cases and PgRecordStore apply when a case
-- is opened or found again): a money fact or payment-state's attention names its merchant; an MT5
-- operation, journal, attention or monitor alert names our payment or withdrawal, whose merchant
-- our money facts and attentions carry; a settlement row names our payment or withdrawal
-- (reference) and the PSP's intent (a capture's, at the row's provider); an MT5 deal names our
-- operation by its comment. One merchant: the case's. None or several: NULL, and only an operator
-- of every merchant sees the case.
--
-- Adding a nullable column rewrites nothing. cases_merchant serves the scoped queue (ORDER BY id
-- within the operator's merchants); attention_payment the lookup of a payment's merchant among
-- attentions (few rows: a person must decide each).
ALTER TABLE cases ADD COLUMN merchant_id text;
CREATE INDEX cases_merchant ON cases (merchant_id, id);
CREATE INDEX attention_payment ON attention (payment_id);

-- Backfill: the cases opened before this migration, by the same rule written in SQL (the rule's
-- unit tests are the reference; a case this misses is given its merchant by the next run that
-- finds it). A case whose records name no merchant, or two, stays NULL.
WITH payment_refs AS (
  SELECT c.id, c.evidence -> f.record ->> f.field AS payment_id
  FROM cases c
  CROSS JOIN (VALUES ('credit', 'payment_id'), ('credit', 'withdrawal_id'),
                     ('debit', 'payment_id'), ('debit', 'withdrawal_id'),
                     ('operation', 'payment_id'), ('operation', 'withdrawal_id'),
                     ('journal', 'payment_id'), ('attention', 'payment_id'),
                     ('settlement', 'reference')) AS f (record, field)
  WHERE jsonb_typeof(c.evidence -> f.record) = 'object'
  UNION
  SELECT c.id, c.evidence ->> 'payment_id' FROM cases c  -- a monitor alert's payment
),
comment_refs AS (
  SELECT c.id, d.deal ->> 'comment' AS comment
  FROM cases c
  CROSS JOIN LATERAL (
    SELECT c.evidence -> 'deal' WHERE jsonb_typeof(c.evidence -> 'deal') = 'object'
    UNION ALL
    SELECT jsonb_array_elements(c.evidence -> 'deals') WHERE jsonb_typeof(c.evidence -> 'deals') = 'array'
  ) AS d (deal)
  WHERE d.deal ->> 'comment' ~ '^(dep|dbt|wdr|wbk):[0-9]{1,18}$'
),
payments AS (
  SELECT id, payment_id FROM payment_refs WHERE payment_id <> ''
  UNION
  SELECT r.id, o.payment_id FROM comment_refs r JOIN mt5_operations o ON o.comment = r.comment
  UNION
  SELECT r.id, a.payment_id
  FROM comment_refs r
  JOIN attention a ON a.attention_key = 'mt5-row:' || split_part(r.comment, ':', 2)
                  AND a.source = 'mt5_credit' AND a.facts ->> 'comment' = r.comment
),
named AS (
  SELECT c.id, c.evidence #>> '{fact,merchant_id}' AS merchant_id FROM cases c
  UNION
  SELECT c.id, c.evidence #>> '{attention,facts,merchant_id}' FROM cases c
  UNION
  SELECT p.id, f.merchant_id FROM payments p JOIN money_facts f ON f.payment_id = p.payment_id
  UNION
  SELECT p.id, a.facts ->> 'merchant_id'
  FROM payments p
  JOIN attention a ON a.payment_id = p.payment_id AND a.source = 'payment_state'
  UNION
  SELECT c.id, f.merchant_id
  FROM cases c
  JOIN money_facts f ON f.provider = split_part(c.evidence #>> '{settlement,source_key}', '|', 1)
                    AND f.kind = 'capture'
                    AND f.provider_object_id = c.evidence #>> '{settlement,payment_intent_id}'
  WHERE c.evidence #>> '{settlement,type}' IN ('charge', 'refund', 'dispute')
),
one AS (
  SELECT id, min(merchant_id) AS merchant_id
  FROM named
  WHERE merchant_id <> ''
  GROUP BY id
  HAVING count(DISTINCT merchant_id) = 1
)
UPDATE cases c SET merchant_id = one.merchant_id FROM one WHERE c.id = one.id;
