package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Scheduled events. A scheduled event's row carries its due time in due_at
// (NULL for every other event) and its available_at starts there, so the
// claims, which take rows due by UTC_TIMESTAMP(6), leave it until then. Its
// key is schedule_key (empty for none). Both are written by the scheduled
// insert, used only when an event of the statement is scheduled (the write
// path of other events is the statement it always was), and changed by
// Reschedule. The due time is the database's: UTC_TIMESTAMP(6) is the
// statement's start, the same for every row and column of a statement.

// dueAtSQL is a scheduled row's due time when its schedule has a time (the
// argument, UTC, as text): that time, or the statement's clock when it has
// passed. dueAfterSQL is the due time when its schedule has none (the
// argument, microseconds from the statement's clock).
const (
	dueAtSQL    = `GREATEST(CAST(? AS DATETIME(6)), ` + Now + `)`
	dueAfterSQL = `(` + Now + ` + INTERVAL ? MICROSECOND)`
)

// dueMetaSQL is the metadata md (a JSON object as text; empty for none) with
// the key store.MetaDueAt set to the due time d, as RFC 3339 UTC with six
// fractional digits (2026-12-03T15:04:05.123456Z).
func dueMetaSQL(md, d string) string {
	return `JSON_SET(COALESCE(NULLIF(` + md + `, ''), '{}'), '$.` + store.MetaDueAt + `', DATE_FORMAT(` + d + `, '%Y-%m-%dT%H:%i:%s.%fZ'))`
}

// scheduledRows are the values of one row of the scheduled insert, by how
// its schedule says when it is due: none (an event due at once, in a
// statement with a scheduled one), a time, or a wait from the clock.
type scheduledRows struct {
	plain, at, after string
}

// newScheduled returns the head of the scheduled insert into t (the INSERT
// of the events' columns, due_at and schedule_key) and its rows' values. A
// scheduled row's arguments are the event's seven first columns, its
// metadata, its due argument, its occurred_at, the due argument twice again
// and its key (scheduledArgs); a plain row's those of the plain insert.
func newScheduled(t ident.Table) (string, scheduledRows) {
	head := `INSERT INTO ` + Quote(t) + ` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at, due_at, schedule_key) VALUES `
	row := func(due string) string {
		return `(?, ?, ?, ?, ?, ?, ?, ` + dueMetaSQL("?", due) + `, ?, ` + Now + `, ` + due + `, ` + due + `, ?)`
	}
	return head, scheduledRows{
		plain: `(?, ?, ?, ?, ?, ?, ?, ?, ?, ` + Now + `, ` + Now + `, NULL, '')`,
		at:    row(dueAtSQL),
		after: row(dueAfterSQL),
	}
}

// scheduled reports whether a row of evs is scheduled.
func scheduled(evs []store.Row) bool {
	for i := range evs {
		if !evs[i].Schedule.IsZero() {
			return true
		}
	}
	return false
}

// dueArg returns which due expression schedules s (dueAtSQL: true) and its
// argument: At as UTC text to the microsecond (truncated, as the driver
// sends occurred_at), else After in microseconds (a negative one as 0: due
// at the insert, still scheduled).
func dueArg(s store.Schedule) (bool, any) {
	if !s.At.IsZero() {
		return true, s.At.UTC().Format("2006-01-02 15:04:05.000000")
	}
	return false, max(s.After.Microseconds(), 0)
}

// insertScheduled inserts evs, of which some are scheduled, with one INSERT:
// each scheduled row is due at dueArg's time, its available_at and due_at
// that time, its metadata with MetaDueAt; the others are written as the plain
// insert writes them, due_at NULL.
func (o *outbox) insertScheduled(ctx context.Context, x store.Execer, evs []store.Row) (int64, error) {
	var b strings.Builder
	b.WriteString(o.q.scheduledInsert)
	args := make([]any, 0, 13*len(evs))
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			b.WriteString(", ")
		}
		args = append(args, e.ID, e.Type, e.Version, e.AggregateType, e.AggregateID, e.Topic, string(e.Payload), string(e.Metadata))
		if e.Schedule.IsZero() {
			b.WriteString(o.q.scheduledRows.plain)
			args = append(args, e.OccurredAt.UTC())
			continue
		}
		at, due := dueArg(e.Schedule)
		row := o.q.scheduledRows.after
		if at {
			row = o.q.scheduledRows.at
		}
		b.WriteString(row)
		args = append(args, due, e.OccurredAt.UTC(), due, due, e.Schedule.Key)
	}
	return sqlkit.Affected(ctx, x, b.String(), args...)
}

// rescheduleQueries are Reschedule's statements; find and state by how the
// events are named: [by id, by key].
type rescheduleQueries struct {
	find, state               [2]string
	lock                      string
	cancel, moveAt, moveAfter string
}

// The ways Reschedule names events: the index of rescheduleQueries' arrays.
const (
	byID = iota
	byKey
)

func newRescheduleQueries(t ident.Table) rescheduleQueries {
	rep := strings.NewReplacer("{t}", Quote(t), "{now}", Now, "{pending}", `o.processed_at IS NULL AND o.dead_at IS NULL`,
		"{keyIdx}", Quote(ident.Table{Name: t.Derived("_schedule_key_idx").Name}))
	// The events named: by the id key (a unique lookup), or by the key index
	// (forced: a scan of the table, as the optimizer may choose on a small
	// one, reads every row). The key's column is utf8mb4_bin, which is PAD
	// SPACE: "k" = "k " there; the same byte length makes the match exact,
	// as on the other databases.
	target := [2]string{
		`{t} o WHERE o.id = ? AND o.due_at IS NOT NULL`,
		`{t} o FORCE INDEX ({keyIdx}) WHERE o.schedule_key = ? AND LENGTH(o.schedule_key) = LENGTH(?) AND o.due_at IS NOT NULL`,
	}
	var q rescheduleQueries
	for i, from := range target {
		// Those not due yet, read without locks: the newest committed
		// versions at READ COMMITTED, the transaction's snapshot at
		// REPEATABLE READ. A locking read here would lock the gaps of the
		// index it searches at REPEATABLE READ: by key, the gap where
		// every unkeyed event is inserted when no key sorts before this
		// one; by an id no event has (published and deleted), the tail of
		// the id key, where every new UUIDv7 id goes. Every save would
		// wait for the caller's transaction.
		q.find[i] = rep.Replace(`SELECT o.seq FROM ` + from + ` AND {pending} AND o.due_at > {now}`)
		// What is left of them, read without locks.
		q.state[i] = rep.Replace(`SELECT o.seq, o.processed_at IS NOT NULL, o.dead_at IS NOT NULL FROM ` + from)
	}
	// The rows find returned, locked by their primary key if still not due
	// (a locking read sees the newest committed versions at any isolation,
	// and waits for a row a relay's claim holds, which it then finds
	// published). By the primary key a row that exists is locked alone, no
	// gap; at REPEATABLE READ a row of the snapshot that was deleted since
	// is still in the index (purge keeps it for the snapshot), locked with
	// the gap below it, where no insert goes (seqs only grow).
	q.lock = rep.Replace(`SELECT o.seq FROM ` + bySeq + ` WHERE {pending} AND o.due_at > {now} FOR UPDATE`)
	// The change, by primary key, of the rows lock returned. In x's
	// transaction they are as lock found them; the condition keeps a
	// Reschedule outside one (its locks ended with its statement) from
	// deleting or moving a row a relay published in between.
	q.cancel = rep.Replace(`DELETE o FROM ` + bySeq + ` WHERE {pending}`)
	move := func(due string) string {
		return rep.Replace(`UPDATE ` + bySeq + ` SET o.due_at = ` + due + `, o.available_at = ` + due + `, o.metadata = ` + dueMetaSQL("o.metadata", due) + `
WHERE {pending}`)
	}
	q.moveAt, q.moveAfter = move(dueAtSQL), move(dueAfterSQL)
	return q
}

// Reschedule cancels (deletes) or moves, in x's transaction, the scheduled
// events p names (by id, by key, or both) that are not due yet by the
// database's clock, and counts the others. It finds those not due yet
// without locks (the newest committed versions at READ COMMITTED; at
// REPEATABLE READ the transaction's snapshot, as a PostgreSQL REPEATABLE
// READ transaction sees: an event committed after it is not named), locks
// them by their primary key if they are still not due (the newest committed
// versions), changes them by their primary key, then reads what is left of
// the events it named without locks (at REPEATABLE READ, in x's snapshot).
//
// What it locks, until x's transaction ends: the rows it changes, and at
// REPEATABLE READ the rows it found that came due or were published or
// moved since its snapshot; never a gap of an index where other events are
// inserted, so no save waits for x's transaction at READ COMMITTED or
// REPEATABLE READ. At SERIALIZABLE every read locks what it reads, its
// gaps included (the server's rule for the host's reads too): see
// docs/limits.md. Its locking read waits for a row a relay's unordered
// claim holds, until that batch ends (the row is then published, and
// counted so, or due in x's snapshot); a relay's claim skips the rows it
// holds, and an ordered claim's confirmation leaves them out of its batch.
func (o *outbox) Reschedule(ctx context.Context, x store.Execer, p store.RescheduleParams) (store.RescheduleResult, error) {
	var res store.RescheduleResult
	type named struct {
		by    int
		args  []any
		found []int64 // what find returned
	}
	var names []named
	if p.ID != "" {
		names = append(names, named{by: byID, args: []any{p.ID}})
	}
	if p.Key != "" {
		names = append(names, named{by: byKey, args: []any{p.Key, p.Key}})
	}
	var found []int64
	seen := map[int64]bool{}
	for i, n := range names {
		got, err := sqlkit.Column[int64](ctx, x, o.q.resched.find[n.by], n.args...)
		if err != nil {
			return res, o.rescheduleError(err)
		}
		names[i].found = got
		for _, s := range got {
			if !seen[s] {
				seen[s] = true
				found = append(found, s)
			}
		}
	}
	changed := map[int64]bool{}
	if len(found) > 0 {
		seqs, err := sqlkit.Column[int64](ctx, x, o.q.resched.lock, sqlkit.JSONInts(found))
		if err != nil {
			return res, o.rescheduleError(err)
		}
		for _, s := range seqs {
			changed[s] = true
		}
		if len(seqs) > 0 {
			var n int64
			switch at, due := dueArg(p.To); {
			case p.Cancel:
				n, err = bySeqs(ctx, x, o.q.resched.cancel, seqs)
			case at:
				n, err = bySeqs(ctx, x, o.q.resched.moveAt, seqs, due, due, due)
			default:
				n, err = bySeqs(ctx, x, o.q.resched.moveAfter, seqs, due, due, due)
			}
			if err != nil {
				return res, o.rescheduleError(err)
			}
			res.Changed = n
		}
	}
	counted := map[int64]bool{}
	for _, n := range names {
		if n.by == byID && len(n.found) == 1 && changed[n.found[0]] {
			// The one event of the id was changed: nothing is left to
			// count. Not read again: at SERIALIZABLE that read would lock
			// the gap above a row this transaction deleted, where the next
			// ids go when it had the newest.
			continue
		}
		left, err := sqlkit.Collect(ctx, x, o.q.resched.state[n.by], n.args, func(rows *sql.Rows) (rowState, error) {
			var s rowState
			return s, rows.Scan(&s.seq, &s.processed, &s.dead)
		})
		if err != nil {
			return res, o.rescheduleError(err)
		}
		for _, s := range left {
			// A row changed is gone (cancelled) or pending (moved); one
			// of the rows locked that was published or dead-lettered
			// before the change (outside a transaction) is counted.
			if counted[s.seq] || (changed[s.seq] && !s.processed && !s.dead) {
				continue
			}
			counted[s.seq] = true
			switch {
			case s.processed:
				res.Published++
			case s.dead:
				res.Dead++
			default:
				res.Due++
			}
		}
	}
	return res, nil
}

// rowState is what Reschedule reads of an event it did not change.
type rowState struct {
	seq             int64
	processed, dead bool
}

// rescheduleError names Reschedule in err, and the table when it is missing.
func (o *outbox) rescheduleError(err error) error {
	if IsTableMissing(err) {
		return fmt.Errorf("reschedule: %w: %s: %w", store.ErrTableMissing, o.t, err)
	}
	return fmt.Errorf("reschedule: %w", err)
}

// NextDue is how long until the earliest pending scheduled event not due
// yet comes due: the first entry past the due ones in the scheduled index
// (dead_at, processed_at, due_at), one probe.
func (r *relay) NextDue(ctx context.Context, x store.Execer) (time.Duration, bool, error) {
	var us sql.NullInt64
	if err := sqlkit.QueryRow(ctx, x, r.nextDue, nil, &us); err != nil || !us.Valid {
		return 0, false, err
	}
	return time.Duration(us.Int64) * time.Microsecond, true, nil
}

// nextDueSQL is NextDue's statement: NULL when no event waits. The first
// entry in order, not MIN(available_at), which reads every entry of the range
// (the optimizer does not take the minimum from the index here).
const nextDueSQL = `SELECT TIMESTAMPDIFF(MICROSECOND, {now}, (SELECT due_at FROM {t}
  WHERE dead_at IS NULL AND processed_at IS NULL AND due_at > {now}
  ORDER BY due_at LIMIT 1))`

// scheduledStatsSQL are Stats' figures of the scheduled events through the
// scheduled index (dead_at, processed_at, due_at; its pending entries are a
// range): how many are pending, how long until the next not due yet comes
// due, how long ago the earliest due one came due (0 for none).
const scheduledStatsSQL = `SELECT COUNT(*),
  COALESCE(TIMESTAMPDIFF(MICROSECOND, {now}, MIN(CASE WHEN due_at > {now} THEN due_at END)), 0),
  GREATEST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(due_at), {now}), 0), 0)
FROM {t} WHERE dead_at IS NULL AND processed_at IS NULL AND due_at IS NOT NULL`

// scheduledStats adds the scheduled events' figures to s.
func (r *relay) scheduledStats(ctx context.Context, x store.Execer, s *store.Stats) error {
	var next, overdue int64
	if err := sqlkit.QueryRow(ctx, x, r.scheduled, nil, &s.Scheduled, &next, &overdue); err != nil {
		return fmt.Errorf("scheduled figures: %w", err)
	}
	s.NextScheduled, s.Overdue = time.Duration(next)*time.Microsecond, time.Duration(overdue)*time.Microsecond
	return nil
}
