-- Layer 1 of the match: what the services' resolvers could not settle and handed to a person
-- (PaymentNeedsAttention from payment-state, Mt5CreditNeedsAttention from mt5-credit), and whether
-- a later event of the same operation settled it (a terminal payment fact with its operation id,
-- an Mt5Credited / Mt5Debited / Mt5CreditFailed of its row).

CREATE TABLE attention (
  id             bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
  attention_key  text    PRIMARY KEY,  -- payment:<payment_id>:<operation_id>:<kind> | mt5-row:<row_id>
  source         text    NOT NULL CHECK (source IN ('payment_state', 'mt5_credit')),
  subject_key    text,   -- operation:<operation_id> | mt5-row:<row_id>; NULL: about the payment as a whole
  payment_id     text    NOT NULL,
  kind           text    NOT NULL,  -- the service's case kind, or the MT5 row's kind (credit | debit)
  status         text,   -- the operation's / row's status when it was raised
  detail         text    NOT NULL,  -- what the resolver last said
  facts          jsonb   NOT NULL,  -- the rest of the event (amounts, login, attempts, operation type)
  started_at_ms  bigint, -- when the operation began (its age counts from here), when known
  raised_at_ms   bigint  NOT NULL,
  business_date  date    NOT NULL,
  event_id       text    NOT NULL,
  settled_by     text,   -- the event type that settled it later
  settled_at_ms  bigint
);
CREATE INDEX attention_date ON attention (business_date);
CREATE INDEX attention_open_subject ON attention (subject_key) WHERE settled_by IS NULL;
