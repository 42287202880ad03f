-- +goose Up
-- Herald's audit trail (PostgreSQL): one row per bulk action of the people on
-- call on dead events (a group requeued or purged): when (by the database's
-- clock), by whom (as the caller names them), what, on what, how many events.
-- Neither the write path nor the relay uses it: the admin tools (the herald
-- command, the admin page, package admin) create it at their first such
-- action when missing. It grows by one row per action; delete old rows at
-- will.
CREATE TABLE IF NOT EXISTS "outbox_messages_audit" (
    seq    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL DEFAULT '',
    action text        NOT NULL,
    detail text        NOT NULL DEFAULT '',
    events bigint      NOT NULL DEFAULT 0
);
