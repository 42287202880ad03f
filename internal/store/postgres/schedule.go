package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Scheduled events. A scheduled event's row carries its due time in due_at
// (NULL for every other event) and its available_at starts there, so the
// claims, which take rows due by the database's now(), leave it until then.
// Its key is schedule_key. Both are written by the scheduled insert, used
// only when an event of the statement is scheduled (the write path of other
// events is the statement it always was), and changed by Reschedule.

// dueSQL is a scheduled row's due time from its schedule's columns (at: text,
// ” for none; after: microseconds, negative for none) and the statement's
// clock ck: NULL for a row that is not scheduled.
const dueSQL = `CASE WHEN s.at <> '' THEN greatest(s.at::timestamptz, ck.t)
  WHEN s.after >= 0 THEN ck.t + s.after * interval '1 microsecond' END`

// dueMetaSQL sets the metadata key MetaDueAt of md to the due time d.
func dueMetaSQL(md, d string) string {
	return md + ` || jsonb_build_object('` + store.MetaDueAt + `', to_char(` + d + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))`
}

// scheduledInsertSQL is Insert for a statement with a scheduled event: the
// columns of rows as arrays ($1-$9, as insertArgs), and each row's schedule
// ($10 at, $11 after, $12 key); head is the insert's epoch lock and INSERT
// clause without its column list.
func scheduledInsertSQL(head string) string {
	return head + `(id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at, due_at, schedule_key)
SELECT u.id, u.type, u.version, u.aggregate_type, u.aggregate_id, u.topic, u.payload,
  CASE WHEN d.due IS NULL THEN u.metadata ELSE ` + dueMetaSQL("u.metadata", "d.due") + ` END,
  u.occurred_at, ck.t, coalesce(d.due, ck.t), d.due, s.key
FROM herald_epoch,
  unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])
    WITH ORDINALITY AS u(id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, n)
  JOIN unnest($10::text[], $11::bigint[], $12::text[]) WITH ORDINALITY AS s(at, after, key, n) ON s.n = u.n
  CROSS JOIN LATERAL (SELECT clock_timestamp() AS t) ck
  CROSS JOIN LATERAL (SELECT ` + dueSQL + ` AS due) d`
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

// scheduleArgs are the scheduled insert's $10-$12: each row's at (RFC 3339,
// ” for none), after (microseconds, -1 for none) and key.
func scheduleArgs(evs []store.Row) []any {
	at, after, key := make([]string, len(evs)), make([]int64, len(evs)), make([]string, len(evs))
	for i := range evs {
		at[i], after[i], key[i] = scheduleCols(evs[i].Schedule)
	}
	return []any{at, after, key}
}

// scheduleCols are s's at, after and key columns: a non-zero s without a
// time is due now (after 0).
func scheduleCols(s store.Schedule) (string, int64, string) {
	switch {
	case !s.At.IsZero():
		return s.At.UTC().Format(time.RFC3339Nano), -1, s.Key
	case s.IsZero():
		return "", -1, ""
	}
	return "", max(s.After.Microseconds(), 0), s.Key
}

// rescheduleQueries are Reschedule's statements.
type rescheduleQueries struct {
	cancel, move, counts string
}

func newRescheduleQueries(t ident.Table) rescheduleQueries {
	// The events named ($1 id, or $2 key) that are not due yet by the
	// statement's clock. The DELETE and UPDATE wait for a row a claim holds
	// (locked FOR UPDATE until its batch ends), and then find it published.
	target := `(o.id = nullif($1, '')::uuid OR (o.schedule_key = $2 AND $2 <> '')) AND o.due_at IS NOT NULL`
	changeable := target + ` AND o.processed_at IS NULL AND o.dead_at IS NULL AND o.due_at > clock_timestamp()`
	var q rescheduleQueries
	q.cancel = `DELETE FROM ` + t.Quoted() + ` o WHERE ` + changeable + ` RETURNING o.id::text`
	// A move is an insert of the event at its new time as far as the claim
	// positions go: it takes the epoch lock first and starts at its clock.
	q.move = `WITH herald_epoch AS MATERIALIZED (SELECT ` + epochLockSQL(t) + `),
s AS (SELECT $3::text AS at, $4::bigint AS after),
ck AS (SELECT clock_timestamp() AS t FROM herald_epoch),
d AS (SELECT ` + dueSQL + ` AS due FROM s, ck)
UPDATE ` + t.Quoted() + ` o SET due_at = d.due, available_at = d.due, metadata = ` + dueMetaSQL("o.metadata", "d.due") + `
FROM d WHERE ` + changeable + ` RETURNING o.id::text`
	q.counts = `SELECT count(*) FILTER (WHERE o.processed_at IS NOT NULL), count(*) FILTER (WHERE o.dead_at IS NOT NULL),
  count(*) FILTER (WHERE o.processed_at IS NULL AND o.dead_at IS NULL)
FROM ` + t.Quoted() + ` o WHERE ` + target + ` AND o.id::text <> ALL($3::text[])`
	return q
}

// Reschedule cancels or moves the scheduled events p names that are not due
// yet, in x's transaction, then counts the others.
func (o *outbox) Reschedule(ctx context.Context, x store.Execer, p store.RescheduleParams) (store.RescheduleResult, error) {
	var res store.RescheduleResult
	q, args := o.resched.cancel, []any{p.ID, p.Key}
	if !p.Cancel {
		at, after, _ := scheduleCols(p.To)
		if at == "" && after < 0 {
			after = 0 // the zero To: due now
		}
		q, args = o.resched.move, append(args, at, after)
	}
	changed, err := sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (string, error) {
		var id string
		return id, rows.Scan(&id)
	})
	if err != nil {
		return res, o.insertError(fmt.Errorf("reschedule: %w", err))
	}
	res.Changed = int64(len(changed))
	if changed == nil {
		changed = []string{}
	}
	err = sqlkit.QueryRow(ctx, x, o.resched.counts, []any{p.ID, p.Key, changed}, &res.Published, &res.Dead, &res.Due)
	return res, err
}

// NextDue is how long until the earliest pending scheduled event not due
// yet is due, through the scheduled index. The relay asks at each wait (see
// nextDueSQL).
func (r *relay) NextDue(ctx context.Context, x store.Execer) (time.Duration, bool, error) {
	var secs sql.NullFloat64
	err := sqlkit.QueryRow(ctx, x, r.q().nextDue, nil, &secs)
	if err != nil || !secs.Valid {
		return 0, false, err
	}
	return time.Duration(secs.Float64 * float64(time.Second)), true, nil
}

// scheduledStats are Stats' figures of the scheduled events, through the
// scheduled index: how many are pending, how long until the next is due, how
// long ago the earliest due one came due.
const scheduledStatsSQL = `SELECT count(*),
  coalesce(extract(epoch FROM min(due_at) FILTER (WHERE due_at > now()) - now()), 0)::float8,
  coalesce(extract(epoch FROM now() - min(due_at) FILTER (WHERE due_at <= now())), 0)::float8
FROM {t} WHERE due_at IS NOT NULL AND {pending}`

// nextDueSQL is NextDue's statement: NULL when no event waits. The first
// pending scheduled event after now() in due_at order, which only the
// scheduled index yields (an index-only scan that starts at now(), past the
// entries of the events published when due); any other index would need a
// sort, which the LIMIT makes dearer. Written as min(due_at), the statement
// was planned on a new or small outbox (costs of a one-page index tie) as a
// full scan of the pending or aggregate index filtered on due_at, and a
// connection keeps the plan of a statement without parameters: while a
// transaction held vacuum back, each of the relay's waits then visited the
// heap row of every event published since (at 30,000 dead rows, 700 buffers
// and 3 ms a wait; through the scheduled index, 2 buffers).
const nextDueSQL = `SELECT extract(epoch FROM (SELECT o.due_at FROM {t} o
  WHERE o.due_at IS NOT NULL AND o.processed_at IS NULL AND o.dead_at IS NULL AND o.due_at > now()
  ORDER BY o.due_at LIMIT 1) - now())::float8`
