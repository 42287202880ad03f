-- +goose Up
-- Herald's audit trail (SQLite): one row per bulk action of the people on
-- call on dead events (a group requeued or purged): when (UTC unix
-- microseconds, by the database's clock), by whom (as the caller names
-- them), what, on what, how many events. Neither the write path nor the
-- relay uses it: the admin tools (the herald command, the admin page, package
-- admin) create it at their first such action when missing. It grows by one
-- row per action; delete old rows at will.
CREATE TABLE IF NOT EXISTS "outbox_messages_audit" (
    seq    INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL,
    actor  TEXT    NOT NULL DEFAULT '',
    action TEXT    NOT NULL,
    detail TEXT    NOT NULL DEFAULT '',
    events INTEGER NOT NULL DEFAULT 0
);
