-- +goose Up
-- Herald outbox table (PostgreSQL), partitioned by occurred_at: the variant
-- for retention by partition drop (relay.Config.DropPartitions), in place of
-- the plain table of the main set's 0001 (the other migrations are the same).
-- Published events are kept (processed_at set) and whole partitions are
-- dropped once every event in them was published more than the retention
-- ago, instead of deleted row by row; the relay creates the range partitions
-- ahead of time, and events outside every range land in the default
-- partition, cleaned row by row. A partitioned table's unique key must hold
-- the partition key: the key is (id, occurred_at), and an event keeps both
-- when it is written again. seq is a bigserial (PostgreSQL before 17 has no
-- identity column on a partitioned table): a writer role needs USAGE on its
-- sequence "outbox_messages_seq_seq" too.
CREATE TABLE IF NOT EXISTS "outbox_messages" (
    id             uuid        NOT NULL,
    seq            bigserial,
    type           text        NOT NULL,
    version        int         NOT NULL DEFAULT 1,
    aggregate_type text        NOT NULL DEFAULT '',
    aggregate_id   text        NOT NULL DEFAULT '',
    topic          text        NOT NULL,
    payload        jsonb       NOT NULL,
    metadata       jsonb       NOT NULL DEFAULT '{}',
    occurred_at    timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    available_at   timestamptz NOT NULL DEFAULT now(),
    attempts       int         NOT NULL DEFAULT 0,
    strikes        int         NOT NULL DEFAULT 0,
    last_error     text,
    last_failed_at timestamptz,
    processed_at   timestamptz,
    dead_at        timestamptz,
    PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE TABLE IF NOT EXISTS "outbox_messages_default" PARTITION OF "outbox_messages" DEFAULT;
CREATE INDEX IF NOT EXISTS "outbox_messages_pending_idx" ON "outbox_messages" (available_at, id)
    WHERE processed_at IS NULL AND dead_at IS NULL;
