package mysql

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Admin returns the operations the people on call run on the outbox table t.
func (Driver) Admin(t ident.Table) store.Admin { return newAdmin(t) }

// requeueSet makes a dead event pending again, as the relay's Requeue does.
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = ` + Now

// readCommitted is the isolation of the admin's writes: in READ COMMITTED
// InnoDB takes no gap locks (a writer's insert never waits for a requeue) and
// an UPDATE passes over rows other transactions locked that it does not
// change (the rows relays claimed) instead of waiting for them.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

type admin struct {
	t   ident.Table
	rel store.Relay
	q   struct{ topics, published, retains, findDead, deadOfType, deadBefore, requeueSeqs, purgeSeqs string }
}

func newAdmin(t ident.Table) *admin {
	a := &admin{t: t, rel: newRelay(t)}
	rep := strings.NewReplacer("{t}", Quote(t), "{cols}", claimCols, "{set}", requeueSet, "{now}", Now)
	// Unpublished rows only (pending and dead), by topic; the published rows a
	// retention keeps are counted apart, through the processed index.
	a.q.topics = rep.Replace(`SELECT topic,
  SUM(dead_at IS NULL),
  SUM(dead_at IS NULL AND attempts > 0),
  SUM(dead_at IS NOT NULL),
  TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN dead_at IS NULL THEN created_at END), {now})
FROM {t} WHERE processed_at IS NULL GROUP BY topic`)
	a.q.published = rep.Replace(`SELECT topic, COUNT(*) FROM {t} WHERE processed_at >= {now} - INTERVAL 1 MINUTE GROUP BY topic`)
	a.q.retains = rep.Replace(`SELECT EXISTS (SELECT 1 FROM {t} WHERE processed_at IS NOT NULL)`)
	a.q.findDead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL {where} ORDER BY o.dead_at, o.seq LIMIT ?`)
	// The writes find their rows first, by a read that locks nothing, then
	// change them by the primary key (as the relay's Requeue does): through a
	// secondary index an UPDATE locks index entries a relay's mark may wait
	// for while it waits for the relay's rows.
	a.q.deadOfType = rep.Replace(`SELECT seq FROM {t} WHERE dead_at IS NOT NULL AND type = ? ORDER BY seq`)
	a.q.deadBefore = rep.Replace(`SELECT seq FROM {t} WHERE dead_at < {now} - INTERVAL ? MICROSECOND ORDER BY dead_at, seq LIMIT ?`)
	a.q.requeueSeqs = rep.Replace(`UPDATE {t} SET {set} WHERE seq IN ({seqs}) AND dead_at IS NOT NULL`)
	a.q.purgeSeqs = rep.Replace(`DELETE FROM {t} WHERE seq IN ({seqs}) AND dead_at IS NOT NULL`)
	return a
}

func (a *admin) Topics(ctx context.Context, x store.Execer) ([]store.TopicStats, error) {
	byTopic := map[string]*store.TopicStats{}
	rows, err := x.QueryContext(ctx, a.q.topics)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			s   store.TopicStats
			age sql.NullInt64
		)
		if err := rows.Scan(&s.Topic, &s.Pending, &s.Failing, &s.Dead, &age); err != nil {
			return nil, err
		}
		if age.Valid {
			s.OldestPending = time.Duration(age.Int64) * time.Microsecond
		}
		byTopic[s.Topic] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := adminCountPublished(ctx, x, a.q.published, byTopic); err != nil {
		return nil, err
	}
	return adminSortedTopics(byTopic), nil
}

// adminCountPublished adds the counts of q (topic, count) to byTopic.
func adminCountPublished(ctx context.Context, x store.Execer, q string, byTopic map[string]*store.TopicStats) error {
	rows, err := x.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			topic string
			n     int64
		)
		if err := rows.Scan(&topic, &n); err != nil {
			return err
		}
		s := byTopic[topic]
		if s == nil {
			s = &store.TopicStats{Topic: topic}
			byTopic[topic] = s
		}
		s.PublishedLastMinute = n
	}
	return rows.Err()
}

func adminSortedTopics(byTopic map[string]*store.TopicStats) []store.TopicStats {
	out := make([]store.TopicStats, 0, len(byTopic))
	for _, s := range byTopic {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

func (a *admin) RetainsPublished(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := queryRow(ctx, x, a.q.retains, nil, &ok)
	return ok, err
}

func (a *admin) FindDead(ctx context.Context, x store.Execer, f store.DeadFilter, limit int) ([]store.DeadRow, error) {
	var (
		where []string
		args  []any
	)
	if len(f.IDs) > 0 {
		where = append(where, "o.id IN ("+placeholders(len(f.IDs))+")")
		args = append(args, anys(f.IDs)...)
	}
	if f.Type != "" {
		where = append(where, "o.type = ?")
		args = append(args, f.Type)
	}
	if f.OlderThan > 0 {
		where = append(where, "o.dead_at < "+Now+" - INTERVAL ? MICROSECOND")
		args = append(args, f.OlderThan.Microseconds())
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	rows, err := x.QueryContext(ctx, strings.Replace(a.q.findDead, "{where}", cond, 1), append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []store.DeadRow
	for rows.Next() {
		var (
			d       store.DeadRow
			lastErr sql.NullString
			deadAt  any
		)
		c, err := scanClaimed(rows, &lastErr, &deadAt)
		if err != nil {
			return nil, err
		}
		d.Claimed, d.LastError = c, lastErr.String
		if d.DeadAt, err = parseTime(deadAt); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (a *admin) RequeueIDs(ctx context.Context, db store.DB, ids []string) ([]string, error) {
	return store.RequeueEach(ctx, db, readCommitted, a.rel, ids)
}

func (a *admin) RequeueType(ctx context.Context, db store.DB, typ string) (int64, error) {
	var n int64
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		seqs, err := queryInt64s(ctx, tx, a.q.deadOfType, typ)
		if err != nil {
			return err
		}
		n, err = a.bySeqs(ctx, tx, a.q.requeueSeqs, seqs)
		return err
	})
	return n, err
}

func (a *admin) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	var n int64
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		n, err = a.rel.RequeueAll(ctx, tx)
		return err
	})
	return n, err
}

func (a *admin) PurgeDead(ctx context.Context, db store.DB, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		seqs, err := queryInt64s(ctx, tx, a.q.deadBefore, olderThan.Microseconds(), limit)
		if err != nil {
			return err
		}
		n, err = a.bySeqs(ctx, tx, a.q.purgeSeqs, seqs)
		return err
	})
	return n, err
}

// bySeqs runs q on the rows seqs, a thousand at a time, and returns the rows
// it changed.
func (a *admin) bySeqs(ctx context.Context, x store.Execer, q string, seqs []int64) (int64, error) {
	var total int64
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), 1000)]
		seqs = seqs[len(chunk):]
		res, err := x.ExecContext(ctx, strings.Replace(q, "{seqs}", placeholders(len(chunk)), 1), anys(chunk)...)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// queryInt64s runs q and returns the one int64 column of its rows.
func queryInt64s(ctx context.Context, x store.Execer, q string, args ...any) ([]int64, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
