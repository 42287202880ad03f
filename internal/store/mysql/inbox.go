package mysql

import (
	"context"
	"database/sql"
	"fmt"
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
	q := Quote(t)
	return &inbox{
		t:      t,
		insert: `INSERT INTO ` + q + ` (consumer, message_id, processed_at) VALUES (?, ?, ` + Now + `)`,
		// utf8mb4_bin ignores trailing spaces (PAD SPACE): the lengths keep
		// "a" and "a " apart.
		recorded: `SELECT 1 FROM ` + q + ` WHERE consumer = ? AND message_id = ? AND LENGTH(consumer) = ? AND LENGTH(message_id) = ?`,
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
		return false, sqlkit.TableError(in.t, IsTableMissing, err)
	}
	return true, nil
}

// Recorded reports whether (consumer, id) is in the table byte for byte, by a
// consistent read: no lock, no gap lock below SERIALIZABLE; false for a key
// the columns cannot hold (over 255 characters, invalid UTF-8).
func (in *inbox) Recorded(ctx context.Context, x store.Execer, consumer, id string) (bool, error) {
	if !holds(consumer) || !holds(id) {
		return false, nil
	}
	found, err := sqlkit.Found(ctx, x, in.recorded, consumer, id, len(consumer), len(id))
	return found, sqlkit.TableError(in.t, IsTableMissing, err)
}

// Consumers probes the primary key once per name, in one UNION ALL of
// LIMIT 1 consistent reads (no lock, no gap lock below SERIALIZABLE), byte
// for byte as Recorded; false for a name the column cannot hold.
func (in *inbox) Consumers(ctx context.Context, x store.Execer, consumers []string) ([]bool, error) {
	return sqlkit.Probes(ctx, x, in.t, IsTableMissing, consumers, holds, func(i int, c string, args []any) (string, []any) {
		return fmt.Sprintf(`SELECT %d FROM (SELECT 1 FROM %s WHERE consumer = ? AND LENGTH(consumer) = ? LIMIT 1) AS c%d`, i, Quote(in.t), i), append(args, c, len(c))
	})
}

// holds reports whether a key column (VARCHAR(255), utf8mb4) holds s.
func holds(s string) bool { return utf8.ValidString(s) && utf8.RuneCountInString(s) <= 255 }

// Cleanup deletes a batch (DELETE ... LIMIT), at READ COMMITTED: no gap lock
// for the inbox's inserts to wait on; concurrent cleaners take turns on
// InnoDB's row locks.
func (in *inbox) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return cleanup(ctx, db, in.cleanupQ, olderThan, limit)
}
