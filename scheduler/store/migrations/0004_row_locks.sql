-- Bookers lock node rows with SELECT ... FOR UPDATE on PostgreSQL (SQLite has one writer),
-- so the counter the compare-and-set booking used to bump is gone.

ALTER TABLE nodes DROP COLUMN booking_version;
