-- +goose Down
CREATE INDEX `outbox_messages_ordered_idx` ON `outbox_messages` (dead_at, processed_at, seq);
