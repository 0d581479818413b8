-- Operators find a payment's cases (the ops console's deposit story): every case whose records
-- name it, by our payment id (money facts, MT5 operations, journals, attentions carry payment_id)
-- or by the PSP's payment id (settlement rows carry payment_intent_id). The expression must stay
-- the one PgReconStore.cases_where filters on (CASE_PAYMENT_REFS), or the index is not used.
CREATE INDEX cases_payment_refs ON cases USING gin (
  (jsonb_path_query_array(evidence, 'strict $.**.payment_id')
   || jsonb_path_query_array(evidence, 'strict $.**.payment_intent_id'))
);
