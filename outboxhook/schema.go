package outboxhook

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/ident"
)

// SchemaSQL returns the PostgreSQL DDL that creates the outbox table named table
// (optionally schema-qualified) and its pending-rows index, if missing. For the
// default name it is the content of migrations/0001_outbox_messages.sql. It fails
// for a name Config.Validate would refuse.
//
// Columns: id is the event's UUIDv7; seq is the insertion order (per aggregate it
// is commit order: the writers of one aggregate are serialized); available_at is
// when the relay may next try the row; attempts counts failed publishes, strikes
// those of them that happened while the publisher was shown to work (the relay
// kills an event at MaxAttempts strikes, so that an outage kills nothing);
// last_error, last_failed_at, processed_at and dead_at are the relay's
// bookkeeping. The partial index keeps the relay off processed and dead rows.
func SchemaSQL(table string) (string, error) {
	t, err := ident.ParseTable(table)
	if err != nil {
		return "", fmt.Errorf("outboxhook: %w", err)
	}
	return schemaSQL(t), nil
}

func schemaSQL(t ident.Table) string {
	r := strings.NewReplacer("{{table}}", t.Quoted(), "{{index}}", t.Derived("_pending_idx").Name.Quoted())
	return r.Replace(schemaTemplate)
}

const schemaTemplate = `CREATE TABLE IF NOT EXISTS {{table}} (
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
    strikes        int         NOT NULL DEFAULT 0,
    last_error     text,
    last_failed_at timestamptz,
    processed_at   timestamptz,
    dead_at        timestamptz
);
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (available_at, id)
    WHERE processed_at IS NULL AND dead_at IS NULL;
`

// ensureTable creates the outbox table when it is missing. It checks first, so a
// role without CREATE rights never issues DDL against a table that exists.
func ensureTable(ctx context.Context, db *gorm.DB, table ident.Table) error {
	exists, err := tableExists(ctx, db, table)
	if err != nil {
		return err
	}
	if exists {
		return nil
	}
	ddl := schemaSQL(table)
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("outboxhook: create table %s: %w", table, err)
	}
	// One statement at a time: a prepared statement holds only one.
	for _, stmt := range strings.SplitAfter(ddl, ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := sqlDB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outboxhook: create table %s: %w", table, err)
		}
	}
	return nil
}

func tableExists(ctx context.Context, db *gorm.DB, table ident.Table) (bool, error) {
	var found *string
	if err := db.WithContext(ctx).Raw("SELECT to_regclass(?)::text", table.Quoted()).Scan(&found).Error; err != nil {
		return false, fmt.Errorf("outboxhook: look up table %s: %w", table, err)
	}
	return found != nil, nil
}
