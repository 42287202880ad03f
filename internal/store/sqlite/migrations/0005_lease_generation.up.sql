-- +goose Up
-- The generation of each partition lease of ordered mode, bumped at every
-- Acquire (a renewal keeps it): the fencing token the relay's writes check in
-- the statement that writes, so that an instance paused past its lease
-- changes nothing once another took the partition over. The relay adds the
-- column itself when it is missing.
ALTER TABLE "outbox_messages_leases" ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
