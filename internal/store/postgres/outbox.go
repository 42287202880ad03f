package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Outbox returns the operations on the outbox table t.
func (Driver) Outbox(t ident.Table) store.Outbox { return newOutbox(t) }

type outbox struct {
	t       ident.Table
	insert  [2][2]string // by [several events][returning tokens]
	sched   [2]string    // by [returning tokens]: with a scheduled event
	resched rescheduleQueries
	lockQ   string
}

func newOutbox(t ident.Table) *outbox {
	o := &outbox{t: t}
	o.lockQ = `SELECT k FROM ` + t.Derived("_locks").Quoted() + ` WHERE k = ANY($1::bigint[]) ORDER BY k FOR UPDATE`
	// The first insert of a transaction into the table first takes the
	// table's shared epoch lock (see Positions), so that a relay can tell when
	// every row inserted before a moment has committed or rolled back; each
	// row's available_at is the time of its insert (not the transaction's
	// start), which the hook's path makes just before the commit. created_at
	// is that time too, not the column's default (now(), the transaction's
	// start): the oldest pending age counts from the write, as on every
	// database.
	into := `WITH herald_epoch AS MATERIALIZED (SELECT ` + epochLockSQL(t) + `)
INSERT INTO ` + t.Quoted() + ` `
	head := into + `(id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at) `
	rows := [2]string{
		`SELECT $1::uuid, $2::text, $3::int, $4::text, $5::text, $6::text, $7::jsonb, $8::jsonb, $9::timestamptz, clock_timestamp(), clock_timestamp() FROM herald_epoch`,
		`SELECT u.*, clock_timestamp(), clock_timestamp() FROM herald_epoch, unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[]) AS u`,
	}
	// Returning, per inserted row, its id, the 32-bit id of the (sub)transaction
	// that inserted it (xmin) and the current top-level full transaction id, from
	// which xid64 widens the former for pg_xact_status. No conflict target: a
	// partitioned outbox's key is (id, occurred_at), an event keeps both.
	tails := [2]string{
		` ON CONFLICT DO NOTHING`,
		` ON CONFLICT DO NOTHING RETURNING id::text, xmin::text::bigint, pg_current_xact_id()::text::bigint`,
	}
	for many := range 2 {
		for returning := range 2 {
			o.insert[many][returning] = head + rows[many] + tails[returning]
		}
	}
	for returning := range 2 {
		o.sched[returning] = scheduledInsertSQL(into) + tails[returning]
	}
	o.resched = newRescheduleQueries(t)
	return o
}

func (o *outbox) Exists(ctx context.Context, x store.Execer) (bool, error) {
	return exists(ctx, x, o.t.Quoted())
}

// Create creates, when missing, what the migrations make for the write path:
// the outbox (0001) and the aggregate locks table, filled (0006).
func (o *outbox) Create(ctx context.Context, x store.Execer) error {
	return schema.CreateOutbox(ctx, x, o.t)
}

func (o *outbox) Check(ctx context.Context, x store.Execer) error {
	return schema.CheckOutbox(ctx, x, o.t)
}

func (o *outbox) Insert(ctx context.Context, x store.Execer, p store.OutboxInsertParams) (int64, map[uuid.UUID]int64, error) {
	evs, tokens := p.Rows, p.Tokens
	query := o.insert[min(len(evs)-1, 1)][btoi(tokens)]
	args := insertArgs(evs)
	if scheduled(evs) {
		query, args = o.sched[btoi(tokens)], append(insertArrays(evs), scheduleArgs(evs)...)
	}
	if !tokens {
		res, err := x.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, nil, o.insertError(err)
		}
		n, _ := res.RowsAffected()
		return n, nil, nil
	}
	rows, err := x.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, nil, o.insertError(err)
	}
	defer func() { _ = rows.Close() }()
	out := make(map[uuid.UUID]int64, len(evs))
	for rows.Next() {
		var (
			id        string
			xmin, top int64
		)
		if err := rows.Scan(&id, &xmin, &top); err != nil {
			return 0, nil, o.insertError(err)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return 0, nil, o.insertError(err)
		}
		out[u] = xid64(xmin, top)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, o.insertError(err)
	}
	return int64(len(out)), out, nil
}

func (o *outbox) insertError(err error) error {
	if IsTableMissing(err) {
		return fmt.Errorf("%w: %s: %w", store.ErrTableMissing, o.t, err)
	}
	return err
}

// insertArgs are the insert's parameters: the columns of one row, or for
// several rows one array per column (so the statement's text, and its prepared
// plan, never change with the number of events).
func insertArgs(evs []store.Row) []any {
	if len(evs) == 1 {
		e := &evs[0]
		return []any{e.ID, e.Type, int32(e.Version), e.AggregateType, e.AggregateID, e.Topic,
			string(e.Payload), string(e.Metadata), e.OccurredAt}
	}
	return insertArrays(evs)
}

// insertArrays are the columns of evs, one array per column.
func insertArrays(evs []store.Row) []any {
	n := len(evs)
	var (
		ids, types, aggTypes, aggIDs, topics, payloads, metadata = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions = make([]int32, n)
		occurred = make([]time.Time, n)
	)
	for i := range evs {
		e := &evs[i]
		ids[i], types[i], versions[i], aggTypes[i], aggIDs[i] = e.ID, e.Type, int32(e.Version), e.AggregateType, e.AggregateID
		topics[i], payloads[i], metadata[i], occurred[i] = e.Topic, string(e.Payload), string(e.Metadata), e.OccurredAt
	}
	return []any{ids, types, versions, aggTypes, aggIDs, topics, payloads, metadata, occurred}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// xid64 widens xmin, a 32-bit (sub)transaction id of the current transaction, to
// the 64-bit full id pg_xact_status takes, using top, the current top-level full
// id: a subtransaction's id is never below its parent's, so xmin is in top's
// epoch unless it wrapped past 2^32 after top.
func xid64(xmin, top int64) int64 {
	epoch := top >> 32
	if xmin < top&0xFFFFFFFF {
		epoch++
	}
	return epoch<<32 | xmin
}

// Settle asks pg_xact_status whether each write's (sub)transaction committed.
func (o *outbox) Settle(ctx context.Context, x store.Execer, ws []store.Written) ([]store.Outcome, error) {
	xids := make([]int64, len(ws))
	for i, w := range ws {
		xids[i] = w.Token
	}
	rows, err := x.QueryContext(ctx, `SELECT x, pg_xact_status(x::text::xid8) FROM unnest($1::bigint[]) AS x`, xids)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	status := make(map[int64]string, len(xids))
	for rows.Next() {
		var (
			xid int64
			s   sql.NullString
		)
		if err := rows.Scan(&xid, &s); err != nil {
			return nil, err
		}
		status[xid] = s.String
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]store.Outcome, len(ws))
	for i, w := range ws {
		switch status[w.Token] {
		case "committed":
			out[i] = store.Committed
		case "in progress":
			out[i] = store.InProgress
		}
	}
	return out, nil
}

// Present returns which of ids have a row x sees.
func (o *outbox) Present(ctx context.Context, x store.Execer, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return sqlkit.FoundIDs(ctx, x, `SELECT id::text FROM `+o.t.Quoted()+` WHERE id = ANY($1::uuid[])`, s)
}

// LockAggregates locks each key's row of the locks table (sqlkit.Buckets),
// in ascending order (FOR UPDATE applies after ORDER BY), until the
// transaction ends: a second writer of the aggregate waits for the first.
// Row locks take no entry in the server's shared lock table, unlike an
// advisory lock per key, which a transaction writing thousands of
// aggregates would exhaust for every session.
func (o *outbox) LockAggregates(ctx context.Context, x store.Execer, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	b := sqlkit.Buckets(keys)
	n, err := sqlkit.Affected(ctx, x, o.lockQ, b)
	if err != nil {
		if IsTableMissing(err) {
			return fmt.Errorf("%w: %s (migration 0006): %w", store.ErrTableMissing, o.t.Derived("_locks"), err)
		}
		return err
	}
	if n != int64(len(b)) {
		return fmt.Errorf("postgres: %d of %d aggregate lock rows missing in %s (run the migrations)", int64(len(b))-n, len(b), o.t.Derived("_locks"))
	}
	return nil
}

// Abort raises an error in x's transaction: PostgreSQL then rolls it back at
// COMMIT.
func (o *outbox) Abort(ctx context.Context, x store.Execer) {
	_, _ = x.ExecContext(context.WithoutCancel(ctx),
		`DO $$BEGIN RAISE EXCEPTION 'herald: an outbox write of this transaction failed; roll it back'; END$$`)
}
