-- +goose Up
-- The aggregate index of ordered claims, holding only the events that can
-- hold the later events of their aggregate back: those that may be pending
-- and not due, retries (attempts > 0) and scheduled events (due_at set).
-- Every other event is due from its insert on (available_at defaults to the
-- insert's clock, requeues and recoveries make rows due at once, and the
-- ordered claims take it as due whatever its available_at says, which is
-- later than the clock only after the clock stepped back), so it never
-- holds its aggregate back. An event published at its first attempt,
-- nearly all of them, is then in no aggregate index: its DELETE no longer
-- writes a page of one (a batch's deletes touched a leaf page of the
-- aggregate index per aggregate, scattered, each written to the WAL at the
-- batch's commit). It replaces the aggregate index of 0002_relay.
CREATE INDEX IF NOT EXISTS "outbox_messages_blockers_idx" ON "outbox_messages" (aggregate_type, aggregate_id, seq)
    WHERE processed_at IS NULL AND dead_at IS NULL AND (attempts > 0 OR due_at IS NOT NULL);
DROP INDEX IF EXISTS "outbox_messages_aggregate_idx";
