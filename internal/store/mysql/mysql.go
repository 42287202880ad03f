// Package mysql is Herald's storage for MySQL 8.0.16+ and MariaDB 10.6+
// (InnoDB): all of its SQL, and its migrations. It works through database/sql
// on go-sql-driver/mysql (gorm.io/driver/mysql). Herald is tested on MariaDB
// 10.11; it uses only SQL that MySQL 8 accepts too: FOR UPDATE SKIP LOCKED, no
// RETURNING (MySQL has none), no partial indexes, no transactional DDL.
//
// Times are UTC: Herald writes UTC_TIMESTAMP(6) and compares with it, whatever
// the session's time zone. Inserts are plain INSERTs: neither INSERT IGNORE
// (which would also swallow a CHECK constraint's or a truncation's error and
// drop the row) nor ON DUPLICATE KEY UPDATE (whose count cannot tell a
// duplicate from a new row under clientFoundRows, which GORM's Save needs). A
// duplicate key fails only its statement in MySQL, so an insert that meets one
// is retried row by row, skipping the rows that exist.
package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are MySQL's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Now is the database's current UTC time, to the microsecond.
const Now = `UTC_TIMESTAMP(6)`

// Driver is the MySQL/MariaDB implementation of store.Driver.
type Driver struct{}

var _ store.Driver = Driver{}

// Name returns "mysql".
func (Driver) Name() string { return "mysql" }

// Caps: row locks (FOR UPDATE SKIP LOCKED); found rows counted as affected
// (clientFoundRows). No LISTEN/NOTIFY, no claim position, no partitions.
func (Driver) Caps() store.Caps { return store.Caps(store.RowLocks | store.FoundRows) }

// readCommitted is the isolation of every transaction Herald begins on MySQL
// that locks rows (the relay's claims and marks, lease acquisition, cleanup,
// the admin's writes), whatever the session's default: in READ COMMITTED
// InnoDB takes no gap locks, so an application's INSERT of new events never
// waits for a claim held across a publish, a cleanup or a requeue; and an
// UPDATE passes over rows other transactions locked that it does not change
// (the rows relays claimed) instead of waiting for them. go-sql-driver runs
// SET TRANSACTION ISOLATION LEVEL before the transaction's BEGIN: it holds
// for that transaction alone.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// LockingTx returns READ COMMITTED (see readCommitted).
func (Driver) LockingTx() *sql.TxOptions { return &sql.TxOptions{Isolation: readCommitted.Isolation} }

// Quote quotes t with backticks.
func (Driver) Quote(t ident.Table) string { return Quote(t) }

// Quote quotes t with backticks: `schema`.`table`.
func Quote(t ident.Table) string {
	if t.Schema == "" {
		return "`" + string(t.Name) + "`"
	}
	return "`" + string(t.Schema) + "`.`" + string(t.Name) + "`"
}

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    BIGINT       NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES (?, ?)`
}

// IsTableMissing reports whether err is MySQL's "table doesn't exist" (1146).
func IsTableMissing(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Error 1146") || strings.Contains(err.Error(), "doesn't exist"))
}

// exists reports whether the table, or the index, named n exists.
func exists(ctx context.Context, x store.Execer, n ident.Table, index bool, on ident.Table) (bool, error) {
	schema := any(nil)
	if n.Schema != "" {
		schema = string(n.Schema)
	}
	q := `SELECT 1 FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`
	args := []any{schema, string(n.Name)}
	if index {
		q = `SELECT 1 FROM information_schema.statistics WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND index_name = ?`
		args = []any{schema, string(on.Name), string(n.Name)}
	}
	return store.Found(ctx, x, q, args...)
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

func objectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	switch o.Kind {
	case store.KindColumn:
		schema := any(nil)
		if o.Name.Schema != "" {
			schema = string(o.Name.Schema)
		}
		return store.Found(ctx, x, `SELECT 1 FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?`, schema, string(o.Name.Name), o.Column)
	case store.KindStep:
		return store.Found(ctx, x, o.Check)
	case store.KindIndex:
		return exists(ctx, x, o.Name, true, o.On)
	}
	return exists(ctx, x, o.Name, false, o.Name)
}

// schema is what Herald creates and checks from the migrations (MySQL's
// CREATE INDEX has no IF NOT EXISTS: each object is looked up first).
var schema = store.Schema{FS: Migrations(), Quote: Quote, Exists: objectExists}

// Outbox returns the operations on the outbox table t.
func (Driver) Outbox(t ident.Table) store.Outbox { return &outbox{t: t} }

// Inbox returns the operations on the inbox table t.
func (Driver) Inbox(t ident.Table) store.Inbox { return newInbox(t) }

type outbox struct {
	t ident.Table
}

func (o *outbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, o.t, false, o.t)
}

func (o *outbox) Create(ctx context.Context, x store.Execer) error {
	return schema.CreateOutbox(ctx, x, o.t)
}

func (o *outbox) Check(ctx context.Context, x store.Execer) error {
	return schema.CheckOutbox(ctx, x, o.t)
}

// ErrTooLong is returned for a value longer than its column.
var ErrTooLong = errors.New("value longer than its column")

// maxRows bounds the rows of one INSERT (65535 placeholders at most).
const maxRows = 1000

// Insert inserts evs with one multi-row INSERT; if a row's id exists, row by
// row, leaving existing rows alone. MySQL cannot tell another transaction's
// fate: no tokens; Settle looks the rows up.
func (o *outbox) Insert(ctx context.Context, x store.Execer, evs []store.Row, _ bool) (int64, map[uuid.UUID]int64, error) {
	for i := range evs {
		e := &evs[i]
		for col, v := range map[string]string{"type": e.Type, "topic": e.Topic, "aggregate_type": e.AggregateType, "aggregate_id": e.AggregateID} {
			if len([]rune(v)) > 255 {
				return 0, nil, fmt.Errorf("%w: event %s: %s is %d characters, at most 255", ErrTooLong, e.ID, col, len([]rune(v)))
			}
		}
	}
	var total int64
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), maxRows)]
		evs = evs[len(chunk):]
		n, err := o.insert(ctx, x, chunk)
		if IsDuplicate(err) {
			n, err = 0, nil
			for i := range chunk {
				one, rerr := o.insert(ctx, x, chunk[i:i+1])
				if rerr != nil && !IsDuplicate(rerr) {
					err = rerr
					break
				}
				n += one
			}
		}
		total += n
		if err != nil {
			if IsTableMissing(err) {
				return total, nil, fmt.Errorf("%w: %s: %w", store.ErrTableMissing, o.t, err)
			}
			return total, nil, err
		}
	}
	return total, nil, nil
}

func (o *outbox) insert(ctx context.Context, x store.Execer, evs []store.Row) (int64, error) {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + Quote(o.t) + ` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at) VALUES `)
	args := make([]any, 0, 9*len(evs))
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, " + Now + ", " + Now + ")")
		args = append(args, e.ID, e.Type, e.Version, e.AggregateType, e.AggregateID, e.Topic,
			string(e.Payload), string(e.Metadata), e.OccurredAt.UTC())
	}
	return store.Affected(ctx, x, b.String(), args...)
}

// IsDuplicate reports whether err is MySQL's duplicate key error (1062).
func IsDuplicate(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error 1062")
}

// Settle looks the events up: a row that exists was committed; one that does
// not rolled back, or was committed and already published and deleted: Unknown
// writes it again, which at worst publishes it twice (at-least-once).
func (o *outbox) Settle(ctx context.Context, x store.Execer, ws []store.Written) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(ws))
	for i, w := range ws {
		rows, err := x.QueryContext(ctx, `SELECT 1 FROM `+Quote(o.t)+` WHERE id = ?`, w.ID.String())
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
	return store.FoundIn(ctx, x, `SELECT id FROM `+Quote(o.t)+` WHERE id IN `, ids)
}

// LockAggregates locks each key's row of the locks table (store.Buckets), in ascending order,
// with SELECT ... FOR UPDATE: a record lock on an existing row (no gap lock,
// unlike an insert of a missing key), held until the transaction ends, so a
// second writer of the aggregate waits for the first.
func (o *outbox) LockAggregates(ctx context.Context, x store.Execer, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	b := store.Buckets(keys)
	got, err := store.Column[int64](ctx, x, `SELECT k FROM `+Quote(o.t.Derived("_locks"))+` WHERE k IN (`+placeholders(len(b))+`) ORDER BY k FOR UPDATE`, anys(b)...)
	if err != nil {
		return err
	}
	if len(got) != len(b) {
		return fmt.Errorf("mysql: %d of %d aggregate lock rows missing in %s (run the migrations)", len(b)-len(got), len(b), Quote(o.t.Derived("_locks")))
	}
	return nil
}

// Abort does nothing: MySQL cannot keep a transaction from committing.
func (o *outbox) Abort(context.Context, store.Execer) {}

type inbox struct {
	t                ident.Table
	insert, cleanupQ string
}

func newInbox(t ident.Table) *inbox {
	q := Quote(t)
	return &inbox{
		t:        t,
		insert:   `INSERT INTO ` + q + ` (consumer, message_id, processed_at) VALUES (?, ?, ` + Now + `)`,
		cleanupQ: `DELETE FROM ` + q + ` WHERE processed_at < ` + Now + ` - INTERVAL ? MICROSECOND LIMIT ?`,
	}
}

func (in *inbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, in.t, false, in.t)
}

func (in *inbox) Create(ctx context.Context, x store.Execer) error {
	return schema.CreateInbox(ctx, x, in.t)
}

func (in *inbox) Check(ctx context.Context, x store.Execer) error {
	return schema.CheckInbox(ctx, x, in.t)
}

func (in *inbox) Insert(ctx context.Context, x store.Execer, consumer, id string) (bool, error) {
	if len([]rune(consumer)) > 255 || len([]rune(id)) > 255 {
		return false, fmt.Errorf("%w: consumer and message id must be at most 255 characters", ErrTooLong)
	}
	// A duplicate fails the statement alone; a concurrent insert of the key
	// waits for the first to end.
	if _, err := x.ExecContext(ctx, in.insert, consumer, id); err != nil {
		if IsDuplicate(err) {
			return false, nil
		}
		if IsTableMissing(err) {
			return false, fmt.Errorf("%w: %s: %w", store.ErrTableMissing, in.t, err)
		}
		return false, err
	}
	return true, nil
}

// Cleanup deletes a batch (DELETE ... LIMIT), at READ COMMITTED: no gap lock
// for the inbox's inserts to wait on; concurrent cleaners take turns on
// InnoDB's row locks.
func (in *inbox) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return cleanup(ctx, db, in.cleanupQ, olderThan, limit)
}

// cleanup runs a cleanup DELETE in a READ COMMITTED transaction of its own and
// returns how many rows it deleted.
func cleanup(ctx context.Context, db *sql.DB, q string, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) (err error) {
		n, err = store.Affected(ctx, tx, q, olderThan.Microseconds(), limit)
		return err
	})
	return n, err
}

// PermissionDenied reports whether err is MySQL's "command denied" (1142) or
// "access denied" (1044).
func (Driver) PermissionDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Error 1142") || strings.Contains(err.Error(), "Error 1044"))
}
