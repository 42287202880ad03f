package inbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
)

// SchemaSQL returns the PostgreSQL DDL of the inbox table named table
// (optionally schema-qualified), created if missing. For the default name it is
// the content of migrations/0001_inbox_messages.sql. It fails for a name that
// Config.Validate would refuse.
func SchemaSQL(table string) (string, error) {
	t, err := ident.ParseTable(table)
	if err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return schemaSQL(t), nil
}

func schemaSQL(t ident.Table) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS %s ON %s (processed_at);
`, t.Quoted(), t.Derived("_processed_idx").Name.Quoted(), t.Quoted())
}

// ensureTable creates the table when missing; it checks first, so a role
// without DDL rights works once the table exists.
func (in *Inbox) ensureTable(ctx context.Context) error {
	var found *string
	if err := in.db.WithContext(ctx).Raw(`SELECT to_regclass(?)::text`, in.table.Quoted()).Scan(&found).Error; err != nil {
		return fmt.Errorf("inbox: look up table %s: %w", in.cfg.Table, err)
	}
	if found != nil {
		return nil
	}
	sqlDB, err := in.db.DB()
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	for _, stmt := range strings.SplitAfter(schemaSQL(in.table), ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := sqlDB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("inbox: create table %s: %w", in.cfg.Table, err)
		}
	}
	return nil
}
