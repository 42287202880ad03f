-- +goose Down
DROP INDEX `outbox_messages_scheduled_idx` ON `outbox_messages`;
DROP INDEX `outbox_messages_schedule_key_idx` ON `outbox_messages`;
ALTER TABLE `outbox_messages` DROP COLUMN schedule_key;
ALTER TABLE `outbox_messages` DROP COLUMN due_at;
