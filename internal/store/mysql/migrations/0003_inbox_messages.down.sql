-- +goose Down
DROP TABLE IF EXISTS `inbox_messages`;
