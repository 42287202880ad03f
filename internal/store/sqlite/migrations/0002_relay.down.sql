-- +goose Down
DROP INDEX IF EXISTS "outbox_messages_processed_idx";
DROP INDEX IF EXISTS "outbox_messages_dead_idx";
DROP INDEX IF EXISTS "outbox_messages_aggregate_idx";
DROP INDEX IF EXISTS "outbox_messages_ordered_idx";
DROP TABLE IF EXISTS "outbox_messages_relays";
DROP TABLE IF EXISTS "outbox_messages_leases";
