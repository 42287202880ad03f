-- The outbox as Herald created it from commit 4cc428f until a2092c7
-- (outboxhook/migrations/0001_outbox_messages.sql): first_failed_at, no
-- strikes, no last_failed_at.
CREATE TABLE IF NOT EXISTS outbox_messages (
    id             uuid        PRIMARY KEY,
    seq            bigint      GENERATED ALWAYS AS IDENTITY,
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
    last_error     text,
    first_failed_at timestamptz,
    processed_at   timestamptz,
    dead_at        timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_messages_pending_idx ON outbox_messages (available_at, id)
    WHERE processed_at IS NULL AND dead_at IS NULL;
