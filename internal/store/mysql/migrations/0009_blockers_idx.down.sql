-- +goose Down
CREATE INDEX `outbox_messages_aggregate_idx` ON `outbox_messages` (aggregate_type, aggregate_id, dead_at, processed_at, seq);
DROP INDEX `outbox_messages_blockers_idx` ON `outbox_messages`;
ALTER TABLE `outbox_messages` DROP COLUMN blocker_id;
ALTER TABLE `outbox_messages` DROP COLUMN blocker_type;
