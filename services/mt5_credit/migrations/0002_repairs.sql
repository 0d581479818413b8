-- Rows that execute an approved repair of the reconciler (issue 13): their own business key
-- (repair:<repair_id>), so their own deal comment; what they remember of the command to answer it.
ALTER TABLE mt5_credits ADD COLUMN repair_id bigint UNIQUE;
ALTER TABLE mt5_credits ADD COLUMN repair jsonb;
ALTER TABLE mt5_credits ADD CONSTRAINT mt5_credits_repair_whole CHECK ((repair_id IS NULL) = (repair IS NULL));

-- One automatic credit per deposit intent still; a repair credit (approved by two people for a
-- deposit whose credit failed or never came) is the exception, and the repair itself is unique.
DROP INDEX mt5_credits_one_credit_per_deposit;
CREATE UNIQUE INDEX mt5_credits_one_credit_per_deposit ON mt5_credits (deposit_reference)
  WHERE kind = 'credit' AND repair_id IS NULL;
