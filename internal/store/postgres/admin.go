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
	n, err := sqlkit.Affected(ctx, x, r.q().requeue, id)
	return n > 0, err
}

// requeueAll makes every dead event pending again in a statement of its own,
// then forgets the positions: the events keep their places in the order, and
// a claim that ran before the commit passed over them.
func (r *relay) requeueAll(ctx context.Context, db store.DB) (int64, error) {
	n, err := sqlkit.Affected(ctx, db, r.q().requeueAll)
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

var _ store.DeadGroupAdmin = (*admin)(nil)

// The grouping of dead events (store.DeadGroupAdmin). dead_at travels as
// microseconds since the epoch, exact: extract gives a numeric, and the bound
// is rebuilt from it by an interval of whole microseconds.
const (
	scanDeadSQL = `SELECT o.seq, o.id::text, o.type, coalesce(o.last_error, ''), (extract(epoch FROM o.dead_at) * 1000000)::bigint FROM {t} o
WHERE o.dead_at IS NOT NULL {where} ORDER BY o.dead_at, o.seq LIMIT {limit}`
	// deadBound is the timestamp of $n microseconds since the epoch.
	deadBound = `(timestamptz 'epoch' + %s::bigint * interval '1 microsecond')`
)

func (a *admin) ScanDead(ctx context.Context, x store.Execer, s store.DeadScan) ([]store.DeadBrief, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if s.Type != "" {
		where = append(where, "o.type = "+arg(s.Type))
	}
	if s.UpTo > 0 {
		where = append(where, "o.dead_at <= "+fmt.Sprintf(deadBound, arg(s.UpTo)))
	}
	if s.OlderThan > 0 {
		where = append(where, "o.dead_at < now() - "+arg(float64(s.OlderThan.Microseconds()))+"::float8 * interval '1 microsecond'")
	}
	if s.AfterDeadAt > 0 {
		where = append(where, "(o.dead_at, o.seq) > ("+fmt.Sprintf(deadBound, arg(s.AfterDeadAt))+", "+arg(s.AfterSeq)+"::bigint)")
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	q := strings.NewReplacer("{t}", a.t.Quoted(), "{where}", cond, "{limit}", arg(s.Limit)).Replace(scanDeadSQL)
	return sqlkit.ScanDead(ctx, x, q, args)
}

func (a *admin) ActDead(ctx context.Context, db store.DB, act store.DeadAction, evs []store.DeadBrief, upTo int64) (int64, error) {
	var q string
	cond := `id = ANY($1::uuid[]) AND dead_at IS NOT NULL AND dead_at <= ` + fmt.Sprintf(deadBound, "$2")
	switch act {
	case store.ActRequeue:
		q = `UPDATE ` + a.t.Quoted() + ` SET ` + requeueSet + ` WHERE ` + cond
	case store.ActPurge:
		q = `DELETE FROM ` + a.t.Quoted() + ` WHERE ` + cond
	default:
		return 0, fmt.Errorf("postgres: unknown dead action %d", act)
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	n, err := sqlkit.ActChunks(ctx, db, nil, act == store.ActPurge, ids, func(c []string) any { return c }, q, upTo)
	if err == nil && n > 0 && act == store.ActRequeue {
		a.rel.pos.rewind() // as requeueAll: the events keep their places in the order
	}
	return n, err
}

func (a *admin) CreateAudit(ctx context.Context, x store.Execer) error {
	return schema.CreateAdmin(ctx, x, a.t)
}

func (a *admin) AddAudit(ctx context.Context, x store.Execer, e store.AuditEntry) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+a.t.Derived("_audit").Quoted()+` (actor, action, detail, events) VALUES ($1, $2, $3, $4)`,
		e.By, e.Action, e.Detail, e.Events)
	return err
}

func (a *admin) FindAudit(ctx context.Context, x store.Execer, limit int) ([]store.AuditEntry, error) {
	ok, err := schema.AdminExists(ctx, x, a.t)
	if err != nil || !ok {
		return nil, err
	}
	return sqlkit.Collect(ctx, x, `SELECT seq, at, actor, action, detail, events FROM `+a.t.Derived("_audit").Quoted()+` ORDER BY seq DESC LIMIT $1`,
		[]any{limit}, func(rows *sql.Rows) (store.AuditEntry, error) {
			var e store.AuditEntry
			err := rows.Scan(&e.Seq, &e.At, &e.By, &e.Action, &e.Detail, &e.Events)
			return e, err
		})
}
