package postgres

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

// Admin returns the operations the people on call run on the outbox table t.
func (Driver) Admin(t ident.Table) store.Admin { return newAdmin(t) }

type admin struct {
	t   ident.Table
	rel *relay
	q   struct {
		topics, published, retains, findDead, findFailing, failingGroups, requeueType, purge string
		findScheduled, findOverdue                                                           string
	}
}

func newAdmin(t ident.Table) *admin {
	a := &admin{t: t, rel: newRelay(t)}
	rep := strings.NewReplacer("{since}", pendingSince, "{t}", t.Quoted(), "{cols}", claimCols, "{set}", requeueSet)
	// Unpublished rows only (pending and dead), by topic; the published rows a
	// retention keeps are counted apart, through the processed index. A
	// scheduled event's age counts from its due time, once due, as in Stats
	// (pendingSince).
	a.q.topics = rep.Replace(`SELECT topic,
  count(*) FILTER (WHERE dead_at IS NULL),
  count(*) FILTER (WHERE dead_at IS NULL AND attempts > 0),
  count(*) FILTER (WHERE dead_at IS NOT NULL),
  (extract(epoch FROM now() - min({since}) FILTER (WHERE dead_at IS NULL)) * 1e6)::bigint
FROM {t} WHERE processed_at IS NULL GROUP BY topic`)
	a.q.published = rep.Replace(`SELECT topic, count(*) FROM {t} WHERE processed_at >= now() - interval '1 minute' GROUP BY topic`)
	a.q.retains = rep.Replace(`SELECT EXISTS (SELECT 1 FROM {t} WHERE processed_at IS NOT NULL)`)
	a.q.findDead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL {where} ORDER BY o.dead_at, o.seq LIMIT {limit}`)
	// Failing: pending with a failed attempt (few rows: the pending index
	// holds the pending ones).
	a.q.findFailing = rep.Replace(`SELECT {cols}, o.last_error, o.last_failed_at, o.available_at FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 {where} ORDER BY o.available_at, o.seq LIMIT {limit}`)
	a.q.failingGroups = rep.Replace(`SELECT o.type, coalesce(o.last_error, ''), count(*), max(o.attempts), min(o.available_at), max(o.last_failed_at) FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 {where}
GROUP BY o.type, coalesce(o.last_error, '') ORDER BY count(*) DESC, o.type, coalesce(o.last_error, '') LIMIT {limit}`)
	// Scheduled: the pending rows with a due time, in the scheduled index's
	// order (a partial index on due_at of exactly those rows).
	scheduled := `SELECT o.id::text, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.occurred_at, o.attempts, o.last_error,
  o.due_at, o.schedule_key FROM {t} o
WHERE o.due_at IS NOT NULL AND o.processed_at IS NULL AND o.dead_at IS NULL{due} ORDER BY o.due_at, o.seq LIMIT $1`
	a.q.findScheduled = strings.NewReplacer("{t}", t.Quoted(), "{due}", "").Replace(scheduled)
	a.q.findOverdue = strings.NewReplacer("{t}", t.Quoted(), "{due}", " AND o.due_at <= now()").Replace(scheduled)
	a.q.requeueType = rep.Replace(`UPDATE {t} SET {set} WHERE dead_at IS NOT NULL AND type = $1`)
	// The pick skips rows others locked (another operator's requeue in
	// progress), and the DELETE checks again that each row it deletes is
	// still dead for that long: a requeue, or a requeue and a new death,
	// committed after the pick would otherwise lose a pending event.
	a.q.purge = rep.Replace(`DELETE FROM {t} WHERE id IN (
  SELECT id FROM {t} WHERE dead_at < now() - $1::float8 * interval '1 microsecond' LIMIT $2 FOR UPDATE SKIP LOCKED)
AND dead_at < now() - $1::float8 * interval '1 microsecond'`)
	return a
}

func (a *admin) Topics(ctx context.Context, x store.Execer) ([]store.TopicStats, error) {
	return sqlkit.ScanTopics(ctx, x, a.q.topics, a.q.published)
}

func (a *admin) RetainsPublished(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := sqlkit.QueryRow(ctx, x, a.q.retains, nil, &ok)
	return ok, err
}

func (a *admin) FindDead(ctx context.Context, x store.Execer, f store.DeadFilter, limit int) ([]store.Row, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.IDs) > 0 {
		where = append(where, "o.id = ANY("+arg(f.IDs)+"::uuid[])")
	}
	if f.Type != "" {
		where = append(where, "o.type = "+arg(f.Type))
	}
	if f.OlderThan > 0 {
		where = append(where, "o.dead_at < now() - "+arg(float64(f.OlderThan.Microseconds()))+"::float8 * interval '1 microsecond'")
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	q := strings.NewReplacer("{where}", cond, "{limit}", arg(limit)).Replace(a.q.findDead)
	return sqlkit.Collect(ctx, x, q, args, scanDead)
}

// failing returns q (findFailing or failingGroups) for f and limit, and its
// arguments.
func (a *admin) failing(q string, f store.FailingFilter, limit int) (string, []any) {
	cond, args := "", []any{}
	if f.Type != "" {
		cond, args = "AND o.type = $1", append(args, f.Type)
	}
	args = append(args, limit)
	return strings.NewReplacer("{where}", cond, "{limit}", fmt.Sprintf("$%d", len(args))).Replace(q), args
}

func (a *admin) FindFailing(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.Row, error) {
	q, args := a.failing(a.q.findFailing, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var (
			lastErr  sql.NullString
			failedAt sql.NullTime
			next     time.Time
		)
		r, err := scanClaimed(rows, &lastErr, &failedAt, &next)
		r.LastError, r.LastFailedAt, r.NextAttemptAt = lastErr.String, failedAt.Time, next
		return r, err
	})
}

func (a *admin) FailingGroups(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.FailureGroup, error) {
	q, args := a.failing(a.q.failingGroups, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.FailureGroup, error) {
		var (
			g        store.FailureGroup
			failedAt sql.NullTime
		)
		err := rows.Scan(&g.Type, &g.LastError, &g.Events, &g.MaxAttempts, &g.NextAttemptAt, &failedAt)
		g.LastFailedAt = failedAt.Time
		return g, err
	})
}

func (a *admin) FindScheduled(ctx context.Context, x store.Execer, p store.ScheduledParams) ([]store.Row, error) {
	q := a.q.findScheduled
	if p.Overdue {
		q = a.q.findOverdue
	}
	return sqlkit.Collect(ctx, x, q, []any{p.Limit}, func(rows *sql.Rows) (store.Row, error) {
		var (
			r       store.Row
			lastErr sql.NullString
			due     time.Time
		)
		err := rows.Scan(&r.ID, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &r.OccurredAt, &r.Attempts, &lastErr,
			&due, &r.Schedule.Key)
		r.LastError, r.Schedule.At = lastErr.String, due.UTC()
		return r, err
	})
}

func (a *admin) RequeueIDs(ctx context.Context, db store.DB, ids []string) ([]string, error) {
	return sqlkit.RequeueEach(ctx, db, nil, a.rel.requeue, ids)
}

func (a *admin) RequeueType(ctx context.Context, db store.DB, typ string) (int64, error) {
	return sqlkit.Affected(ctx, db, a.q.requeueType, typ)
}

func (a *admin) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	return a.rel.requeueAll(ctx, db)
}

func (a *admin) PurgeDead(ctx context.Context, db store.DB, olderThan time.Duration, limit int) (int64, error) {
	return sqlkit.Affected(ctx, db, a.q.purge, float64(olderThan.Microseconds()), limit)
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := sqlkit.Affected(ctx, x, r.q.requeue, id)
	return n > 0, err
}

// requeueAll makes every dead event pending again in a statement of its own,
// then forgets the positions: the events keep their places in the order, and
// a claim that ran before the commit passed over them.
func (r *relay) requeueAll(ctx context.Context, db store.DB) (int64, error) {
	n, err := sqlkit.Affected(ctx, db, r.q.requeueAll)
	if n > 0 {
		r.pos.rewind()
	}
	return n, err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  time.Time
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	d.LastError, d.DeadAt = lastErr.String, deadAt
	return d, err
}
