package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
		insert:   `INSERT INTO ` + q + ` (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		recorded: `SELECT 1 FROM ` + q + ` WHERE consumer = $1 AND message_id = $2`,
		// By ctid: the primary key's order is not the age order, and a DELETE
		// cannot take a LIMIT.
		cleanupQ: `DELETE FROM ` + q + ` WHERE ctid = ANY (ARRAY(SELECT ctid FROM ` + q +
			` WHERE processed_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2))`,
	}
}

func (in *inbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, in.t.Quoted())
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

// Recorded reports whether (consumer, id) is in the table, by a plain read
// (no lock); false for a key text cannot hold (a NUL byte, invalid UTF-8).
func (in *inbox) Recorded(ctx context.Context, x store.Execer, consumer, id string) (bool, error) {
	if !holds(consumer) || !holds(id) {
		return false, nil
	}
	found, err := sqlkit.Found(ctx, x, in.recorded, consumer, id)
	return found, sqlkit.TableError(in.t, IsTableMissing, err)
}

// Consumers probes the primary key once per name, in one UNION ALL of
// LIMIT 1 reads (no lock); false for a name text cannot hold.
func (in *inbox) Consumers(ctx context.Context, x store.Execer, consumers []string) ([]bool, error) {
	return sqlkit.Probes(ctx, x, in.t, IsTableMissing, consumers, holds, func(i int, c string, args []any) (string, []any) {
		args = append(args, c)
		return fmt.Sprintf(`SELECT %d FROM (SELECT 1 FROM %s WHERE consumer = $%d LIMIT 1) AS c%d`, i, in.t.Quoted(), len(args), i), args
	})
}

// holds reports whether a text column holds s: valid UTF-8 without NUL.
func holds(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Cleanup deletes a batch under a transaction-scoped advisory lock keyed by the
// table's oid, so one instance cleans at a time and tables of one name in other
// schemas clean apart.
func (in *inbox) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.inbox.cleanup:", in.t, in.cleanupQ, float64(olderThan.Milliseconds()), limit)
}
