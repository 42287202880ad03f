-- +goose Up
-- Herald inbox table (MySQL / MariaDB). processed_at is UTC. Run as the table's
-- owner; the consumer role needs SELECT, INSERT, DELETE on it. Herald creates
-- it when missing, unless DisableAutoCreate is set.
CREATE TABLE IF NOT EXISTS `inbox_messages` (
    consumer     VARCHAR(255) NOT NULL,
    message_id   VARCHAR(255) NOT NULL,
    processed_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY `inbox_messages_processed_idx` (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
