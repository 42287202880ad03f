package postgres

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store"
)

// Self-creation runs in one transaction: when it stops between a table and
// the column a later migration adds to it (here the column's statement
// fails; in CI's TestTerminateRelayBackends the relay's connection was cut
// there), neither is left, and the next start makes both. Before, the table
// stayed without the column, outdated (ErrSchemaOutdated) until Migrate ran.
func TestSelfCreationIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.SchemaDB(t)
	fsys := fstest.MapFS{
		"0001_outbox_messages.up.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS \"outbox_messages\" (id int);\n")},
		"0001_outbox_messages.down.sql": {Data: []byte("DROP TABLE \"outbox_messages\";\n")},
		"0002_later.up.sql":             {Data: []byte("ALTER TABLE \"outbox_messages\" ADD COLUMN IF NOT EXISTS g no_such_type;\n")},
		"0002_later.down.sql":           {Data: []byte("ALTER TABLE \"outbox_messages\" DROP COLUMN g;\n")},
	}
	s := schema
	s.FS = fsys
	tbl := ident.MustTable(store.DefaultOutbox)
	if err := s.CreateOutbox(ctx, db, tbl); err == nil {
		t.Fatal("the creation whose column cannot be made succeeded")
	}
	var left bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('outbox_messages') IS NOT NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left {
		t.Fatal("the table was left without the later migration's column")
	}
}
