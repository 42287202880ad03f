package sqlite

import (
	"context"
	"fmt"
	"hash/fnv"
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
	// resched are Reschedule's statements.
	resched rescheduleQueries
}

func newOutbox(t ident.Table) *outbox {
	return &outbox{t: t, resched: newRescheduleQueries(t)}
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
// alone; a statement with a scheduled event is the scheduled insert
// (scheduledInsert), every other the statement it always was. SQLite has no
// transaction ids: tokens are not returned; Settle looks the rows up instead.
func (o *outbox) Insert(ctx context.Context, x store.Execer, p store.OutboxInsertParams) (int64, map[uuid.UUID]int64, error) {
	evs := p.Rows
	var total int64
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), maxRows)]
		evs = evs[len(chunk):]
		if scheduled(chunk) {
			n, err := o.scheduledInsert(ctx, x, chunk)
			total += n
			if err != nil {
				return total, nil, err
			}
			continue
		}
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
			return total, nil, o.tableError(err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil, nil
}

// tableError wraps err in store.ErrTableMissing when it says the outbox
// table does not exist.
func (o *outbox) tableError(err error) error {
	if IsTableMissing(err) {
		return fmt.Errorf("%w: %s: %w", store.ErrTableMissing, o.t, err)
	}
	return err
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
	return sqlkit.FoundIn(ctx, x, `SELECT id FROM `+o.t.Quoted()+` WHERE id IN `, ids)
}

// LockAggregates does nothing: a write transaction holds SQLite's one write
// lock from its first write (from BEGIN, with BEGIN IMMEDIATE) to its end, so
// the writers of any aggregate are serialized already.
func (o *outbox) LockAggregates(context.Context, store.Execer, []int64) error { return nil }

// Abort does nothing: SQLite cannot keep a transaction from committing.
func (o *outbox) Abort(context.Context, store.Execer) {}
