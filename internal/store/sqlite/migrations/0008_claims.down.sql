-- +goose Down
DROP TABLE IF EXISTS "outbox_messages_claims";
