-- +goose Up
-- Herald aggregate locks table (PostgreSQL): serializes the writers of one
-- aggregate (one whose events do not come from its own row: Typed or
-- Identified models, Add and AddMessages naming an aggregate). Aggregates are
-- hashed into its 65,536 rows, made here once, and a writer locks its
-- aggregates' rows (SELECT ... FOR UPDATE). Row locks live in the rows, not in
-- the server's shared lock table, so a transaction writing any number of
-- aggregates takes no more of it. A writer role needs SELECT, UPDATE on it.
-- Herald creates and fills it when missing, unless DisableAutoCreate is set.
CREATE TABLE IF NOT EXISTS "outbox_messages_locks" (
    k bigint PRIMARY KEY
);
INSERT INTO "outbox_messages_locks" (k) SELECT generate_series(0, 65535) ON CONFLICT DO NOTHING;
