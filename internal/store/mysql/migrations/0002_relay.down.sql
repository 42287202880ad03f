-- +goose Down
DROP INDEX `outbox_messages_processed_idx` ON `outbox_messages`;
DROP INDEX `outbox_messages_aggregate_idx` ON `outbox_messages`;
DROP INDEX `outbox_messages_ordered_idx` ON `outbox_messages`;
DROP TABLE IF EXISTS `outbox_messages_relays`;
DROP TABLE IF EXISTS `outbox_messages_leases`;
