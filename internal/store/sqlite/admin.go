package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// requeueSet makes a dead event pending again (the admin's requeues).
// created_at is reset too: the oldest pending age (Stats, the admin's Topics)
// counts from the requeue, not from the first insert, or a requeued event
// would make the outbox unhealthy at once. Nothing else reads created_at (the
// partitioned outbox is partitioned by occurred_at, which is kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = ` + Now + `, created_at = ` + Now

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
	rep := strings.NewReplacer("{since}", pendingSince, "{t}", t.Quoted(), "{cols}", claimCols, "{set}", requeueSet, "{now}", Now)
	// Unpublished rows only (pending and dead), by topic; the published rows a
	// retention keeps are counted apart, through the processed index. A
	// scheduled event's age counts from its due time, once due, as in Stats
	// (pendingSince).
	a.q.topics = rep.Replace(`SELECT topic,
  coalesce(sum(dead_at IS NULL), 0),
  coalesce(sum(dead_at IS NULL AND attempts > 0), 0),
  coalesce(sum(dead_at IS NOT NULL), 0),
  {now} - min(CASE WHEN dead_at IS NULL THEN {since} END)
FROM {t} WHERE processed_at IS NULL GROUP BY topic`)
	a.q.published = rep.Replace(`SELECT topic, count(*) FROM {t} WHERE processed_at >= {now} - ` + strconv.FormatInt(time.Minute.Microseconds(), 10) + ` GROUP BY topic`)
	a.q.retains = rep.Replace(`SELECT EXISTS (SELECT 1 FROM {t} WHERE processed_at IS NOT NULL)`)
	a.q.findDead = rep.Replace(`SELECT {cols}, last_error, dead_at FROM {t} WHERE dead_at IS NOT NULL {where} ORDER BY dead_at, seq LIMIT ?`)
	// Failing: pending with a failed attempt, by its next attempt
	// (available_at: an unordered claim leaves it as it was; a row a batch
	// holds shows the retry time it is being tried at).
	a.q.findFailing = rep.Replace(`SELECT {cols}, last_error, last_failed_at, available_at FROM {t}
WHERE processed_at IS NULL AND dead_at IS NULL AND attempts > 0 {where} ORDER BY available_at, seq LIMIT ?`)
	a.q.failingGroups = rep.Replace(`SELECT type, coalesce(last_error, ''), count(*), max(attempts), min(available_at), max(last_failed_at) FROM {t}
WHERE processed_at IS NULL AND dead_at IS NULL AND attempts > 0 {where}
GROUP BY type, coalesce(last_error, '') ORDER BY count(*) DESC, type, coalesce(last_error, '') LIMIT ?`)
	// Scheduled: the pending rows with a due time, in the scheduled index's
	// order (a partial index on due_at of exactly those rows, its entries
	// ending with the rowid, seq).
	scheduled := `SELECT id, type, version, aggregate_type, aggregate_id, topic, occurred_at, attempts, last_error, due_at, schedule_key FROM {t}
WHERE due_at IS NOT NULL AND processed_at IS NULL AND dead_at IS NULL{due} ORDER BY due_at, seq LIMIT ?`
	a.q.findScheduled = strings.NewReplacer("{t}", t.Quoted(), "{due}", "").Replace(scheduled)
	a.q.findOverdue = strings.NewReplacer("{t}", t.Quoted(), "{due}", " AND due_at <= "+Now).Replace(scheduled)
	a.q.requeueType = rep.Replace(`UPDATE {t} SET {set} WHERE dead_at IS NOT NULL AND type = ?`)
	// The DELETE checks again that each row it deletes is dead for that
	// long, as on the other databases (SQLite's single writer runs the
	// statement whole).
	a.q.purge = rep.Replace(`DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} WHERE dead_at < {now} - ?1 LIMIT ?2) AND dead_at < {now} - ?1`)
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
	if len(f.IDs) > 0 {
		where = append(where, "id IN ("+sqlkit.Placeholders(len(f.IDs))+")")
		args = append(args, sqlkit.Anys(f.IDs)...)
	}
	if f.Type != "" {
		where = append(where, "type = ?")
		args = append(args, f.Type)
	}
	if f.OlderThan > 0 {
		where = append(where, "dead_at < "+Now+" - ?")
		args = append(args, f.OlderThan.Microseconds())
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	return sqlkit.Collect(ctx, x, strings.Replace(a.q.findDead, "{where}", cond, 1), append(args, limit), scanDead)
}

// failing returns q (findFailing or failingGroups) for f and limit, and its
// arguments.
func (a *admin) failing(q string, f store.FailingFilter, limit int) (string, []any) {
	cond, args := "", []any{}
	if f.Type != "" {
		cond, args = "AND type = ?", append(args, f.Type)
	}
	return strings.Replace(q, "{where}", cond, 1), append(args, limit)
}

func (a *admin) FindFailing(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.Row, error) {
	q, args := a.failing(a.q.findFailing, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var (
			r                 store.Row
			payload, metadata string
			occurred, next    int64
			failedAt          sql.NullInt64
			lastErr           sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &payload, &metadata,
			&occurred, &r.Attempts, &r.Strikes, &lastErr, &failedAt, &next); err != nil {
			return r, err
		}
		r.Payload, r.Metadata, r.LastError = []byte(payload), []byte(metadata), lastErr.String
		r.OccurredAt, r.NextAttemptAt = time.UnixMicro(occurred).UTC(), time.UnixMicro(next).UTC()
		if failedAt.Valid {
			r.LastFailedAt = time.UnixMicro(failedAt.Int64).UTC()
		}
		return r, nil
	})
}

func (a *admin) FailingGroups(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.FailureGroup, error) {
	q, args := a.failing(a.q.failingGroups, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.FailureGroup, error) {
		var (
			g        store.FailureGroup
			next     int64
			failedAt sql.NullInt64
		)
		if err := rows.Scan(&g.Type, &g.LastError, &g.Events, &g.MaxAttempts, &next, &failedAt); err != nil {
			return g, err
		}
		g.NextAttemptAt = time.UnixMicro(next).UTC()
		if failedAt.Valid {
			g.LastFailedAt = time.UnixMicro(failedAt.Int64).UTC()
		}
		return g, nil
	})
}

func (a *admin) FindScheduled(ctx context.Context, x store.Execer, p store.ScheduledParams) ([]store.Row, error) {
	q := a.q.findScheduled
	if p.Overdue {
		q = a.q.findOverdue
	}
	return sqlkit.Collect(ctx, x, q, []any{p.Limit}, func(rows *sql.Rows) (store.Row, error) {
		var (
			r             store.Row
			occurred, due int64
			lastErr       sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &occurred, &r.Attempts, &lastErr,
			&due, &r.Schedule.Key); err != nil {
			return r, err
		}
		r.OccurredAt, r.Schedule.At, r.LastError = time.UnixMicro(occurred).UTC(), time.UnixMicro(due).UTC(), lastErr.String
		return r, nil
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
	return sqlkit.Affected(ctx, db, a.q.purge, olderThan.Microseconds(), limit)
}

// requeueQueries are the relay's requeues (the admin's): of one dead event,
// of every dead event.
type requeueQueries struct {
	one, all string
}

// newRequeueQueries builds the requeues with rep (newRelay's).
func newRequeueQueries(rep *strings.Replacer) requeueQueries {
	return requeueQueries{
		one: rep.Replace(`UPDATE {t} SET {set}
WHERE id = ? AND dead_at IS NOT NULL`),
		all: rep.Replace(`UPDATE {t} SET {set}
WHERE dead_at IS NOT NULL`),
	}
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := sqlkit.Affected(ctx, x, r.requeues.one, id)
	return n > 0, err
}

// requeueAll makes every dead event pending again.
func (r *relay) requeueAll(ctx context.Context, db store.DB) (int64, error) {
	return sqlkit.Affected(ctx, db, r.requeues.all)
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		d                 store.Row
		payload, metadata string
		occurred, deadAt  int64
		lastErr           sql.NullString
	)
	if err := rows.Scan(&d.ID, &d.Type, &d.Version, &d.AggregateType, &d.AggregateID, &d.Topic, &payload, &metadata,
		&occurred, &d.Attempts, &d.Strikes, &lastErr, &deadAt); err != nil {
		return d, err
	}
	d.Payload, d.Metadata = []byte(payload), []byte(metadata)
	d.OccurredAt, d.DeadAt, d.LastError = time.UnixMicro(occurred).UTC(), time.UnixMicro(deadAt).UTC(), lastErr.String
	return d, nil
}

var _ store.DeadGroupAdmin = (*admin)(nil)

// The grouping of dead events (store.DeadGroupAdmin): dead_at is stored as
// microseconds since the epoch already.
const scanDeadSQL = `SELECT seq, id, type, coalesce(last_error, ''), dead_at FROM {t}
WHERE dead_at IS NOT NULL {where} ORDER BY dead_at, seq LIMIT ?`

func (a *admin) ScanDead(ctx context.Context, x store.Execer, s store.DeadScan) ([]store.DeadBrief, error) {
	var (
		where []string
		args  []any
	)
	if s.Type != "" {
		where, args = append(where, "type = ?"), append(args, s.Type)
	}
	if s.UpTo > 0 {
		where, args = append(where, "dead_at <= ?"), append(args, s.UpTo)
	}
	if s.OlderThan > 0 {
		where, args = append(where, "dead_at < "+Now+" - ?"), append(args, s.OlderThan.Microseconds())
	}
	if s.AfterDeadAt > 0 {
		where, args = append(where, "(dead_at, seq) > (?, ?)"), append(args, s.AfterDeadAt, s.AfterSeq)
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	q := strings.NewReplacer("{t}", a.t.Quoted(), "{where}", cond).Replace(scanDeadSQL)
	return sqlkit.ScanDead(ctx, x, q, append(args, s.Limit))
}

func (a *admin) ActDead(ctx context.Context, db store.DB, act store.DeadAction, evs []store.DeadBrief, upTo int64) (int64, error) {
	var q string
	cond := ` WHERE seq IN (SELECT value FROM json_each(?1)) AND dead_at IS NOT NULL AND dead_at <= ?2`
	switch act {
	case store.ActRequeue:
		q = `UPDATE ` + a.t.Quoted() + ` SET ` + requeueSet + cond
	case store.ActPurge:
		q = `DELETE FROM ` + a.t.Quoted() + cond
	default:
		return 0, fmt.Errorf("sqlite: unknown dead action %d", act)
	}
	return sqlkit.ActChunks(ctx, db, nil, act == store.ActPurge, sqlkit.DeadSeqs(evs), func(c []int64) any { return sqlkit.JSONInts(c) }, q, upTo)
}

func (a *admin) CreateAudit(ctx context.Context, x store.Execer) error {
	return schema.CreateAdmin(ctx, x, a.t)
}

func (a *admin) AddAudit(ctx context.Context, x store.Execer, e store.AuditEntry) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+a.t.Derived("_audit").Quoted()+` (at, actor, action, detail, events) VALUES (`+Now+`, ?, ?, ?, ?)`,
		e.By, e.Action, e.Detail, e.Events)
	return err
}

func (a *admin) FindAudit(ctx context.Context, x store.Execer, limit int) ([]store.AuditEntry, error) {
	ok, err := schema.AdminExists(ctx, x, a.t)
	if err != nil || !ok {
		return nil, err
	}
	return sqlkit.Collect(ctx, x, `SELECT seq, at, actor, action, detail, events FROM `+a.t.Derived("_audit").Quoted()+` ORDER BY seq DESC LIMIT ?`,
		[]any{limit}, func(rows *sql.Rows) (store.AuditEntry, error) {
			var (
				e  store.AuditEntry
				at int64
			)
			err := rows.Scan(&e.Seq, &at, &e.By, &e.Action, &e.Detail, &e.Events)
			e.At = time.UnixMicro(at).UTC()
			return e, err
		})
}
