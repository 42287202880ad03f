-- +goose Up
-- Herald's claims of unordered batches (SQLite, which has no row locks): one
-- row per batch in flight, holding the seqs of the events it claimed (a JSON
-- array) until expires_at (UTC unix microseconds, by the database's clock).
-- An unordered claim takes only due events no live claim holds, writing this
-- one row instead of a lease on each event; the batch's marks apply only
-- while its row exists, and its commit deletes it. A claim deletes the rows
-- that expired (a relay killed or paused past its hold): their events are
-- claimed again. claim is never reused (AUTOINCREMENT): it names one batch
-- for ever, the fencing token of its marks. The relay creates the table
-- itself when it is missing.
CREATE TABLE IF NOT EXISTS "outbox_messages_claims" (
    claim      INTEGER PRIMARY KEY AUTOINCREMENT,
    expires_at INTEGER NOT NULL,
    seqs       TEXT    NOT NULL
);
