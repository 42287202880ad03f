package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Outbox returns the operations on the outbox table t.
func (Driver) Outbox(t ident.Table) store.Outbox { return newOutbox(t) }

type outbox struct {
	t ident.Table
	q struct {
		// insert is the head of the INSERT of events, insertRow one row's
		// values; scheduledInsert and scheduledRows are those of an INSERT
		// with a scheduled event (newScheduled).
		insert, insertRow, scheduledInsert string
		scheduledRows                      scheduledRows
		resched                            rescheduleQueries
	}
}

func newOutbox(t ident.Table) *outbox {
	o := &outbox{t: t}
	o.q.insert = `INSERT INTO ` + Quote(t) + ` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at) VALUES `
	o.q.insertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ` + Now + `, ` + Now + `)`
	o.q.scheduledInsert, o.q.scheduledRows = newScheduled(t)
	o.q.resched = newRescheduleQueries(t)
	return o
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
func (o *outbox) Insert(ctx context.Context, x store.Execer, p store.OutboxInsertParams) (int64, map[uuid.UUID]int64, error) {
	evs := p.Rows
	for i := range evs {
		e := &evs[i]
		for col, v := range map[string]string{"type": e.Type, "topic": e.Topic, "aggregate_type": e.AggregateType, "aggregate_id": e.AggregateID, "schedule_key": e.Schedule.Key} {
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

// insert inserts evs with one INSERT: the scheduled one (insertScheduled)
// when one of them is scheduled, else the statement every other event is
// written with.
func (o *outbox) insert(ctx context.Context, x store.Execer, evs []store.Row) (int64, error) {
	if scheduled(evs) {
		return o.insertScheduled(ctx, x, evs)
	}
	var b strings.Builder
	b.WriteString(o.q.insert)
	args := make([]any, 0, 9*len(evs))
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(o.q.insertRow)
		args = append(args, e.ID, e.Type, e.Version, e.AggregateType, e.AggregateID, e.Topic,
			string(e.Payload), string(e.Metadata), e.OccurredAt.UTC())
	}
	return sqlkit.Affected(ctx, x, b.String(), args...)
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
	return sqlkit.FoundIn(ctx, x, `SELECT id FROM `+Quote(o.t)+` WHERE id IN `, ids)
}

// LockAggregates locks each key's row of the locks table (sqlkit.Buckets), in ascending order,
// with SELECT ... FOR UPDATE: a record lock on an existing row (no gap lock,
// unlike an insert of a missing key), held until the transaction ends, so a
// second writer of the aggregate waits for the first.
func (o *outbox) LockAggregates(ctx context.Context, x store.Execer, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	b := sqlkit.Buckets(keys)
	got, err := sqlkit.Column[int64](ctx, x, `SELECT k FROM `+Quote(o.t.Derived("_locks"))+` WHERE k IN (`+sqlkit.Placeholders(len(b))+`) ORDER BY k FOR UPDATE`, sqlkit.Anys(b)...)
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
