-- Cases that events open before any run (the streaming monitor's alerts, issue 13): such a case has
-- no first run; the run that later finds the same key takes it over (its evidence, its last run).
ALTER TABLE cases ALTER COLUMN first_run_id DROP NOT NULL;
ALTER TABLE cases ALTER COLUMN last_run_id DROP NOT NULL;
