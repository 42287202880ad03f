-- +goose Up
-- Herald's audit trail (MySQL / MariaDB): one row per bulk action of the
-- people on call on dead events (a group requeued or purged): when (UTC, by
-- the database's clock), by whom (as the caller names them), what, on what,
-- how many events. Neither the write path nor the relay uses it: the admin
-- tools (the herald command, the admin page, package admin) create it at
-- their first such action when missing. It grows by one row per action;
-- delete old rows at will.
CREATE TABLE IF NOT EXISTS `outbox_messages_audit` (
    seq    BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at     DATETIME(6)  NOT NULL,
    actor  VARCHAR(255) NOT NULL DEFAULT '',
    action VARCHAR(64)  NOT NULL,
    detail TEXT         NOT NULL,
    events BIGINT       NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
