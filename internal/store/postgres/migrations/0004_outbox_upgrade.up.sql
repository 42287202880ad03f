-- +goose Up
-- Herald outbox upgrade (PostgreSQL): brings an outbox table that an earlier
-- Herald made, before 0001 had these columns, to the shape 0001 makes today
-- (0001 was edited in place then; migrations are append-only since): strikes
-- and last_failed_at, which replaced first_failed_at (left in place, unused).
-- On a table 0001 makes today it changes nothing. Adding a column with a
-- constant default rewrites no row, but takes the table's ACCESS EXCLUSIVE
-- lock for a moment (writers queue behind a long reader of the table meanwhile).
ALTER TABLE "outbox_messages" ADD COLUMN IF NOT EXISTS strikes int NOT NULL DEFAULT 0;
ALTER TABLE "outbox_messages" ADD COLUMN IF NOT EXISTS last_failed_at timestamptz;
