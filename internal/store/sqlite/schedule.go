package sqlite

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
// (UTC unix microseconds; NULL for every other event) and its available_at
// starts there, so the claims, which take rows due by the database's clock,
// leave it until then. Its key is schedule_key. Both are written by the
// scheduled insert, used only when an event of the statement is scheduled
// (the write path of other events is the statement it always was), and
// changed by Reschedule. Whether a scheduled event is due yet is judged by
// due_at, not available_at: a failed attempt moves available_at to the
// retry's time. (An unordered claim leaves it alone: it holds its rows by a
// claim row; an event it holds is due, so neither cancelled nor moved.)

// dueSQL is a scheduled row's due time from its schedule's columns (s_at:
// unix microseconds, NULL for none; s_after: microseconds, NULL for none) by
// the insert's clock (Now, as available_at's default): NULL for a row that is
// not scheduled. An At already past is due at the insert.
const dueSQL = `CASE WHEN s_at IS NOT NULL THEN max(s_at, ` + Now + `)
  WHEN s_after IS NOT NULL THEN ` + Now + ` + s_after END`

// dueText formats the unix microseconds d (an SQL expression) as RFC 3339 in
// UTC with exactly six fractional digits and a Z: 2026-12-03T15:04:05.123456Z.
func dueText(d string) string {
	return `strftime('%Y-%m-%dT%H:%M:%S', ` + d + ` / 1000000, 'unixepoch') || '.' || printf('%06d', ` + d + ` % 1000000) || 'Z'`
}

// dueMetaSQL sets the metadata key store.MetaDueAt of md to the due time d
// (both SQL expressions).
func dueMetaSQL(md, d string) string {
	return `json_set(` + md + `, '$.` + store.MetaDueAt + `', ` + dueText(d) + `)`
}

// scheduleCols is the number of columns of a row of the scheduled insert.
const scheduleCols = 14

// scheduledInsertHead and scheduledInsertTail surround the scheduled insert's
// rows, each "(?, ... ?)" of scheduleCols values (scheduleArgs), on {t}: the
// rows in their order (n), each row's due time computed once (d), its
// available_at the due time or the insert's clock, its metadata with the due
// time. The WHERE of the SELECT is SQLite's rule for an upsert from a
// SELECT (its ON would read as a join's otherwise).
const (
	scheduledInsertHead = `WITH v(n, id, type, version, aggregate_type, aggregate_id, part_key, topic, payload, metadata, occurred_at, s_at, s_after, s_key) AS (VALUES `
	scheduledInsertTail = `),
d AS (SELECT v.*, ` + dueSQL + ` AS due FROM v)
INSERT INTO {t} (id, type, version, aggregate_type, aggregate_id, part_key, topic, payload, metadata, occurred_at, available_at, due_at, schedule_key)
SELECT id, type, version, aggregate_type, aggregate_id, part_key, topic, payload,
  CASE WHEN due IS NULL THEN metadata ELSE {meta} END,
  occurred_at, coalesce(due, ` + Now + `), due, s_key
FROM d WHERE true ORDER BY n
ON CONFLICT (id) DO NOTHING`
)

// scheduled reports whether a row of evs is scheduled.
func scheduled(evs []store.Row) bool {
	for i := range evs {
		if !evs[i].Schedule.IsZero() {
			return true
		}
	}
	return false
}

// scheduleArgs are s's at and after columns: At in unix microseconds, or
// After (a non-zero s without At is due After past its insert, at least
// now), each nil for none; both nil for the zero s.
func scheduleArgs(s store.Schedule) (at, after any) {
	switch {
	case !s.At.IsZero():
		return s.At.UnixMicro(), nil
	case s.IsZero():
		return nil, nil
	}
	return nil, max(s.After.Microseconds(), 0)
}

// scheduledInsert inserts evs (at most maxRows), some scheduled, in one
// statement, leaving rows whose id exists alone, and returns how many it
// inserted.
func (o *outbox) scheduledInsert(ctx context.Context, x store.Execer, evs []store.Row) (int64, error) {
	var b strings.Builder
	b.WriteString(scheduledInsertHead)
	row := "(" + sqlkit.Placeholders(scheduleCols) + ")"
	args := make([]any, 0, scheduleCols*len(evs))
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
		at, after := scheduleArgs(e.Schedule)
		args = append(args, i, e.ID, e.Type, e.Version, e.AggregateType, e.AggregateID, PartKey(e.ID, e.AggregateType, e.AggregateID),
			e.Topic, string(e.Payload), string(e.Metadata), e.OccurredAt.UnixMicro(), at, after, e.Schedule.Key)
	}
	b.WriteString(o.resched.insertTail)
	n, err := sqlkit.Affected(ctx, x, b.String(), args...)
	return n, o.tableError(err)
}

// rescheduleQueries are the statements of the scheduled insert's end
// (insertTail) and of Reschedule.
type rescheduleQueries struct {
	insertTail, cancel, move, counts string
}

func newRescheduleQueries(t ident.Table) rescheduleQueries {
	// The events named (?1 id, or ?2 key), and those of them not due yet by
	// the statement's clock. SQLite has one writer: the caller's transaction
	// holds the write lock, so no claim leases a row between the DELETE or
	// UPDATE and the count.
	const target = `(id = ?1 OR (schedule_key = ?2 AND schedule_key <> '')) AND due_at IS NOT NULL`
	const changeable = target + ` AND {pending} AND due_at > {now}`
	rep := strings.NewReplacer("{t}", t.Quoted(), "{pending}", pending, "{now}", Now, "{meta}", dueMetaSQL("metadata", "due"))
	var q rescheduleQueries
	q.insertTail = rep.Replace(scheduledInsertTail)
	q.cancel = rep.Replace(`DELETE FROM {t} WHERE ` + changeable + ` RETURNING seq`)
	// The new due time (?3 At in unix microseconds, else ?4 After) computed
	// once, as the insert computes it.
	q.move = rep.Replace(`UPDATE {t} SET due_at = d.due, available_at = d.due, metadata = {meta}
FROM (SELECT CASE WHEN ?3 IS NOT NULL THEN max(?3, {now}) ELSE {now} + ?4 END AS due) AS d
WHERE ` + changeable + ` RETURNING seq`)
	// The others (?3: the seqs changed, a JSON array): a pending one is due,
	// being published or waiting for a retry.
	q.counts = rep.Replace(`SELECT coalesce(sum(processed_at IS NOT NULL), 0), coalesce(sum(dead_at IS NOT NULL), 0),
  coalesce(sum({pending}), 0)
FROM {t} WHERE ` + target + ` AND seq NOT IN (SELECT value FROM json_each(?3))`)
	return q
}

// Reschedule cancels (deletes) or moves the scheduled events p names that are
// not due yet, in x's transaction, then counts the others.
func (o *outbox) Reschedule(ctx context.Context, x store.Execer, p store.RescheduleParams) (store.RescheduleResult, error) {
	var res store.RescheduleResult
	q, args := o.resched.cancel, []any{p.ID, p.Key}
	if !p.Cancel {
		at, after := scheduleArgs(p.To)
		if at == nil && after == nil {
			after = int64(0) // the zero To: due now
		}
		q, args = o.resched.move, append(args, at, after)
	}
	changed, err := sqlkit.Column[int64](ctx, x, q, args...)
	if err != nil {
		return res, o.tableError(fmt.Errorf("reschedule: %w", err))
	}
	res.Changed = int64(len(changed))
	err = sqlkit.QueryRow(ctx, x, o.resched.counts, []any{p.ID, p.Key, sqlkit.JSONInts(changed)}, &res.Published, &res.Dead, &res.Due)
	return res, err
}

// NextDue is how long until the earliest pending scheduled event not due
// yet is due, through the scheduled index.
func (r *relay) NextDue(ctx context.Context, x store.Execer) (time.Duration, bool, error) {
	var us sql.NullInt64
	err := sqlkit.QueryRow(ctx, x, r.nextDue, nil, &us)
	if err != nil || !us.Valid {
		return 0, false, err
	}
	return micros(us), true, nil
}

// nextDueSQL is NextDue's statement: the earliest pending scheduled event not
// due yet, through the scheduled index (due_at, of the pending scheduled
// events).
const nextDueSQL = `SELECT min(due_at) - {now} FROM {t} WHERE due_at IS NOT NULL AND {pending} AND due_at > {now}`
