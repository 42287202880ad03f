-- +goose Down
CREATE INDEX `outbox_messages_pending_idx` ON `outbox_messages` (dead_at, processed_at, available_at, seq);
DROP INDEX `outbox_messages_queue_idx` ON `outbox_messages`;
