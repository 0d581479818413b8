-- Repairs of cases under maker-checker (issue 13), and the append-only audit of every operator act.

CREATE TABLE repairs (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  case_id         bigint      NOT NULL REFERENCES cases (id),
  source_key      text        NOT NULL,  -- the record repaired (the case key without its class)
  repair_type     text        NOT NULL CHECK (repair_type IN
                    ('close', 'post_journal', 'mt5_credit', 'mt5_debit', 'apply_provider_fact')),
  target          text        NOT NULL,  -- who executes it: reconciler | ledger | mt5_credit | payment_state
  command         jsonb       NOT NULL,  -- the exact command; its digest is what an approval names
  command_digest  text        NOT NULL CHECK (command_digest ~ '^[0-9a-f]{64}$'),
  revision        integer     NOT NULL DEFAULT 1,
  status          text        NOT NULL CHECK (status IN
                    ('proposed', 'rejected', 'sent', 'executed', 'refused', 'unknown')),
  proposed_by     text        NOT NULL,
  proposed_at     timestamptz NOT NULL DEFAULT now(),
  approved_by     text,
  approved_at     timestamptz,
  approved_digest text,
  rejected_by     text,
  rejected_reason text,
  outcome_detail  text,
  finished_at     timestamptz,
  UNIQUE (source_key, repair_type),
  -- the server's rule, kept by the database too: the checker is never the maker, and an approval
  -- names the command it approved
  CHECK (approved_by IS NULL OR (approved_by <> proposed_by AND approved_digest = command_digest)),
  CHECK (rejected_by IS NULL OR rejected_by <> proposed_by)
);
CREATE INDEX repairs_case ON repairs (case_id);
CREATE INDEX repairs_waiting ON repairs (status) WHERE status IN ('proposed', 'sent', 'unknown');

CREATE TABLE audit (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  operator    text        NOT NULL,
  action      text        NOT NULL,  -- acknowledge | propose | amend | approve | reject | ...
  target      text        NOT NULL,  -- case:<id> | repair:<id>
  outcome     text        NOT NULL CHECK (outcome IN ('done', 'refused')),
  reason      text,                  -- the operator's why, or the server's refusal
  detail      jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_target ON audit (target, id);
CREATE INDEX audit_operator ON audit (operator, id);

CREATE FUNCTION audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
  FOR EACH ROW EXECUTE FUNCTION audit_is_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
  FOR EACH STATEMENT EXECUTE FUNCTION audit_is_append_only();

ALTER TABLE case_history DROP CONSTRAINT case_history_action_check;
ALTER TABLE case_history ADD CONSTRAINT case_history_action_check CHECK (action IN
  ('opened', 'evidence_changed', 'reopened', 'resolved', 'acknowledged', 'repair_proposed',
   'repair_approved', 'repair_rejected', 'repair_executed', 'repair_refused', 'repair_unknown'));
