package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Inbox returns the operations on the inbox table t.
func (Driver) Inbox(t ident.Table) store.Inbox { return newInbox(t) }

type inbox struct {
	t                          ident.Table
	insert, recorded, cleanupQ string
}

func newInbox(t ident.Table) *inbox {
	q := t.Quoted()
	return &inbox{
		t:        t,
		insert:   `INSERT INTO ` + q + ` (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING`,
		recorded: `SELECT 1 FROM ` + q + ` WHERE consumer = ? AND message_id = ?`,
		cleanupQ: `DELETE FROM ` + q + ` WHERE rowid IN (SELECT rowid FROM ` + q + ` WHERE processed_at < ? LIMIT ?)`,
	}
}

func (in *inbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, in.t)
}

func (in *inbox) Create(ctx context.Context, x store.Execer) error {
	return schema.CreateInbox(ctx, x, in.t)
}

func (in *inbox) Check(ctx context.Context, x store.Execer) error {
	return schema.CheckInbox(ctx, x, in.t)
}

func (in *inbox) Insert(ctx context.Context, x store.Execer, consumer, id string) (bool, error) {
	return sqlkit.InsertedOne(ctx, x, in.t, IsTableMissing, in.insert, consumer, id)
}

// Recorded reports whether (consumer, id) is in the table (the columns
// compare byte for byte).
func (in *inbox) Recorded(ctx context.Context, x store.Execer, consumer, id string) (bool, error) {
	found, err := sqlkit.Found(ctx, x, in.recorded, consumer, id)
	return found, sqlkit.TableError(in.t, IsTableMissing, err)
}

// Consumers probes the primary key once per name, in one UNION ALL of
// LIMIT 1 reads.
func (in *inbox) Consumers(ctx context.Context, x store.Execer, consumers []string) ([]bool, error) {
	every := func(string) bool { return true }
	return sqlkit.Probes(ctx, x, in.t, IsTableMissing, consumers, every, func(i int, c string, args []any) (string, []any) {
		return fmt.Sprintf(`SELECT %d FROM (SELECT 1 FROM %s WHERE consumer = ? LIMIT 1)`, i, in.t.Quoted()), append(args, c)
	})
}

// Cleanup deletes a batch; SQLite's single writer makes cleaners take turns.
func (in *inbox) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return sqlkit.Affected(ctx, db, in.cleanupQ, time.Now().Add(-olderThan).UnixMicro(), limit)
}
