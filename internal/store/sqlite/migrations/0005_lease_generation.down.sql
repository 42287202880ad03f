-- +goose Down
ALTER TABLE "outbox_messages_leases" DROP COLUMN generation;
