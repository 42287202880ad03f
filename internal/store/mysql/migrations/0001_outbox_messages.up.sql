-- +goose Up
-- Herald outbox table (MySQL 8.0.16+ / MariaDB 10.6+, InnoDB). Times are UTC
-- (Herald writes UTC_TIMESTAMP(6)); payload and metadata are JSON text. seq is
-- the insertion order. The locks table serializes the writers of one aggregate:
-- aggregates are hashed into its 65,536 rows, made here once, and a writer
-- locks its aggregates' rows (SELECT ... FOR UPDATE: record locks on existing
-- rows, no gap locks). A writer role needs SELECT, INSERT on the outbox and
-- SELECT, UPDATE on the locks. Herald creates the same tables when missing,
-- unless DisableAutoCreate is set.
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
INSERT IGNORE INTO `outbox_messages_locks` (k)
SELECT a.n + 16 * b.n + 256 * c.n + 4096 * d.n
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS b,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS c,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS d;
