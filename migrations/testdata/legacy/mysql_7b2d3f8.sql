-- The outbox as Herald created it from commit 7b2d3f8 until 287df61
-- (internal/store/mysql/migrations/0001_outbox_messages.up.sql): the same
-- outbox, and a locks table writers filled a row at a time (no seed).
CREATE TABLE IF NOT EXISTS `outbox_messages` (
    seq            BIGINT       NOT NULL AUTO_INCREMENT,
    id             CHAR(36)     NOT NULL,
    type           VARCHAR(255) NOT NULL,
    version        INT          NOT NULL DEFAULT 1,
    aggregate_type VARCHAR(255) NOT NULL DEFAULT '',
    aggregate_id   VARCHAR(255) NOT NULL DEFAULT '',
    topic          VARCHAR(255) NOT NULL,
    payload        LONGTEXT     NOT NULL,
    metadata       TEXT         NOT NULL,
    occurred_at    DATETIME(6)  NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    available_at   DATETIME(6)  NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    strikes        INT          NOT NULL DEFAULT 0,
    last_error     TEXT         NULL,
    last_failed_at DATETIME(6)  NULL,
    processed_at   DATETIME(6)  NULL,
    dead_at        DATETIME(6)  NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY `outbox_messages_id_key` (id),
    KEY `outbox_messages_pending_idx` (dead_at, processed_at, available_at, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS `outbox_messages_locks` (
    k BIGINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
-- The rows the writers of two aggregates left.
INSERT INTO `outbox_messages_locks` (k) VALUES (7), (4242);
