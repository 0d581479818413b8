-- A settlement report's rows name their import without a foreign key, like the per-run tables:
-- the import inserts them in the transaction that inserts their imports row, nothing else writes
-- them, and triggers refuse UPDATE and DELETE on both tables, so the reference cannot dangle. The
-- check cost a trigger call and an index probe per row: ~6.7 µs a row, a third of the database's
-- work for a million-row report.
ALTER TABLE settlement_rows DROP CONSTRAINT settlement_rows_import_id_fkey;
