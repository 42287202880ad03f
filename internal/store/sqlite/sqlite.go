// Package sqlite is Herald's storage for SQLite 3.42 and newer: all of its SQL,
// and its migrations. It works through database/sql on any SQLite driver GORM
// opens (Herald tests it with the pure-Go modernc.org/sqlite).
//
// SQLite has one writer at a time and no row locks. Herald relies on that: a
// write transaction must take the write lock when it begins (BEGIN IMMEDIATE:
// the drivers' _txlock=immediate), so that writers queue on the busy timeout
// instead of failing with SQLITE_BUSY when a deferred transaction's snapshot
// went stale; then the writers of one aggregate are serialized with no lock of
// Herald's own. DSN is the DSN with those settings and WAL, which
// internal/drivers checks a connection for (outboxhook.ErrSQLiteSettings).
// Times are UTC unix microseconds in INTEGER columns.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are SQLite's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Now is the database's current time in unix microseconds.
const Now = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

// Driver is the SQLite implementation of store.Driver.
type Driver struct{}

var _ store.Driver = Driver{}

// Name returns "sqlite".
func (Driver) Name() string { return "sqlite" }

// Caps: none (no LISTEN/NOTIFY, no row locks: claims lease their rows; no
// claim position, no partitions).
func (Driver) Caps() store.Caps { return 0 }

// LockingTx returns nil: SQLite has one writer at a time and no row locks;
// its claims lease rows in a statement of their own.
func (Driver) LockingTx() *sql.TxOptions { return nil }

// Quote quotes t with double quotes (the schema is an attached database).
func (Driver) Quote(t ident.Table) string { return t.Quoted() }

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL DEFAULT (` + Now + `)
)`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES (?, ?)`
}

// IsTableMissing reports whether err says a table does not exist.
func IsTableMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// exists reports whether the table or index named n exists.
func exists(ctx context.Context, x store.Execer, n ident.Table) (bool, error) {
	master := "sqlite_schema"
	if n.Schema != "" {
		master = n.Schema.Quoted() + ".sqlite_schema"
	}
	return store.Found(ctx, x, `SELECT 1 FROM `+master+` WHERE name = ? AND type IN ('table', 'index')`, string(n.Name))
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

func objectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	switch o.Kind {
	case store.KindColumn:
		schema := "main"
		if o.Name.Schema != "" {
			schema = string(o.Name.Schema)
		}
		return store.Found(ctx, x, `SELECT 1 FROM pragma_table_info(?, ?) WHERE name = ?`,
			string(o.Name.Name), schema, o.Column)
	case store.KindStep:
		return store.Found(ctx, x, o.Check)
	}
	return exists(ctx, x, o.Name)
}

// schema is what Herald creates and checks from the migrations.
var schema = store.Schema{FS: Migrations(), Quote: ident.Table.Quoted, Exists: objectExists, Atomic: true}

// Outbox returns the operations on the outbox table t.
func (Driver) Outbox(t ident.Table) store.Outbox { return &outbox{t: t} }

// Inbox returns the operations on the inbox table t.
func (Driver) Inbox(t ident.Table) store.Inbox { return newInbox(t) }

type outbox struct {
	t ident.Table
}

func (o *outbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, o.t)
}

func (o *outbox) Create(ctx context.Context, x store.Execer) error {
	return schema.CreateOutbox(ctx, x, o.t)
}

func (o *outbox) Check(ctx context.Context, x store.Execer) error {
	return schema.CheckOutbox(ctx, x, o.t)
}

// maxRows bounds the rows of one INSERT (SQLite allows 32766 parameters).
const maxRows = 1000

// Insert inserts evs with multi-row VALUES, leaving rows whose id exists
// alone. SQLite has no transaction ids: tokens are not returned; Settle looks
// the rows up instead.
func (o *outbox) Insert(ctx context.Context, x store.Execer, evs []store.Row, _ bool) (int64, map[uuid.UUID]int64, error) {
	var total int64
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), maxRows)]
		evs = evs[len(chunk):]
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + o.t.Quoted() + ` (id, type, version, aggregate_type, aggregate_id, part_key, topic, payload, metadata, occurred_at) VALUES `)
		args := make([]any, 0, 10*len(chunk))
		for i := range chunk {
			e := &chunk[i]
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, e.ID, e.Type, e.Version, e.AggregateType, e.AggregateID, PartKey(e.ID, e.AggregateType, e.AggregateID),
				e.Topic, string(e.Payload), string(e.Metadata), e.OccurredAt.UnixMicro())
		}
		b.WriteString(` ON CONFLICT (id) DO NOTHING`)
		res, err := x.ExecContext(ctx, b.String(), args...)
		if err != nil {
			if IsTableMissing(err) {
				return total, nil, fmt.Errorf("%w: %s: %w", store.ErrTableMissing, o.t, err)
			}
			return total, nil, err
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil, nil
}

// PartKey is the 32-bit hash that puts an event in an ordering partition
// (part_key mod partitions): of its aggregate, or of its id for events of none.
func PartKey(id, aggType, aggID string) int64 {
	h := fnv.New32a()
	if aggID == "" {
		h.Write([]byte(id))
	} else {
		h.Write([]byte(aggType))
		h.Write([]byte{':'})
		h.Write([]byte(aggID))
	}
	return int64(h.Sum32())
}

// Settle looks the events up: a row that exists was committed. One that does
// not either rolled back or was committed, published and deleted already;
// Unknown writes it again (under the same id), which at worst publishes it
// twice, as at-least-once delivery allows.
func (o *outbox) Settle(ctx context.Context, x store.Execer, ws []store.Written) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(ws))
	for i, w := range ws {
		rows, err := x.QueryContext(ctx, `SELECT 1 FROM `+o.t.Quoted()+` WHERE id = ?`, w.ID.String())
		if err != nil {
			return nil, err
		}
		if rows.Next() {
			out[i] = store.Committed
		}
		err = rows.Err()
		_ = rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Present returns which of ids have a row x sees.
func (o *outbox) Present(ctx context.Context, x store.Execer, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	return store.FoundIn(ctx, x, `SELECT id FROM `+o.t.Quoted()+` WHERE id IN `, ids)
}

// LockAggregates does nothing: a write transaction holds SQLite's one write
// lock from its first write (from BEGIN, with BEGIN IMMEDIATE) to its end, so
// the writers of any aggregate are serialized already.
func (o *outbox) LockAggregates(context.Context, store.Execer, []int64) error { return nil }

// Abort does nothing: SQLite cannot keep a transaction from committing.
func (o *outbox) Abort(context.Context, store.Execer) {}

type inbox struct {
	t                ident.Table
	insert, cleanupQ string
}

func newInbox(t ident.Table) *inbox {
	q := t.Quoted()
	return &inbox{
		t:        t,
		insert:   `INSERT INTO ` + q + ` (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING`,
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
	res, err := x.ExecContext(ctx, in.insert, consumer, id)
	if err != nil {
		if IsTableMissing(err) {
			return false, fmt.Errorf("%w: %s: %w", store.ErrTableMissing, in.t, err)
		}
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Cleanup deletes a batch; SQLite's single writer makes cleaners take turns.
func (in *inbox) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return store.Affected(ctx, db, in.cleanupQ, time.Now().Add(-olderThan).UnixMicro(), limit)
}

// PermissionDenied reports whether err says the database is read-only or may
// not be written.
func (Driver) PermissionDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "readonly") || strings.Contains(err.Error(), "not authorized"))
}
