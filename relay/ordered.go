package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// leases keeps this instance's share of the ordering partitions. Every third of
// LeaseDuration it records a heartbeat, renews its leases, gives back partitions
// above its fair share (partitions / live instances, rounded up) and takes
// expired ones up to it. A partition is only worked on while its lease has more
// than 1.25 PublishTimeout left by the local clock, so a batch always ends before
// the lease could pass to another instance.
type leases struct {
	r      *Relay
	mu     sync.RWMutex // read by a batch; written when partitions change hands
	until  map[int]time.Time
	seeded bool
	q      leaseQueries
}

type leaseQueries struct {
	seed, heartbeat, live, renew, release, acquire, releaseAll, leave string
}

func newLeases(r *Relay) *leases {
	lt := r.table.Derived("_leases").Quoted()
	rt := r.table.Derived("_relays").Quoted()
	return &leases{r: r, until: map[int]time.Time{}, q: leaseQueries{
		seed: `INSERT INTO ` + lt + ` (partition) SELECT generate_series(0, $1 - 1) ON CONFLICT DO NOTHING`,
		heartbeat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES ($1, now())
ON CONFLICT (instance) DO UPDATE SET seen_at = now()`,
		live: `SELECT count(*) FROM ` + rt + ` WHERE seen_at > now() - $1::float8 * interval '1 millisecond'`,
		renew: `UPDATE ` + lt + ` SET expires_at = now() + $2::float8 * interval '1 millisecond'
WHERE owner = $1 AND expires_at > now() RETURNING partition`,
		release: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1 AND partition = ANY($2::int[])`,
		acquire: `UPDATE ` + lt + ` SET owner = $1, expires_at = now() + $2::float8 * interval '1 millisecond'
WHERE partition IN (SELECT partition FROM ` + lt + ` WHERE expires_at <= now() AND partition < $4
  ORDER BY partition LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING partition`,
		releaseAll: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1`,
		leave:      `DELETE FROM ` + rt + ` WHERE instance = $1`,
	}}
}

func (l *leases) run(ctx context.Context) {
	lim := newLimiter(30 * time.Second)
	every := l.r.cfg.LeaseDuration / 3
	for {
		if err := l.tick(ctx); err != nil && ctx.Err() == nil && lim.allow() {
			l.r.log.Warn("partition leases: renewal failed", "err", err, "suppressed", lim.suppressed())
		}
		if !sleep(ctx, every) {
			break
		}
	}
	// Shutting down: once the batch in flight is done, give the partitions back
	// so that other instances need not wait for the leases to expire.
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.until)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, q := range []string{l.q.releaseAll, l.q.leave} {
		if _, err := l.r.db.ExecContext(rctx, q, l.r.cfg.InstanceID); err != nil {
			l.r.log.Warn("partition leases: release at shutdown failed; they expire by themselves", "err", err)
			return
		}
	}
}

func (l *leases) tick(ctx context.Context) error {
	cfg := l.r.cfg
	db := l.r.db
	leaseMs := float64(cfg.LeaseDuration.Milliseconds())
	if !l.seeded {
		if _, err := db.ExecContext(ctx, l.q.seed, cfg.Partitions); err != nil {
			return fmt.Errorf("seed partitions: %w", err)
		}
		l.seeded = true
	}
	if _, err := db.ExecContext(ctx, l.q.heartbeat, cfg.InstanceID); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	var live int
	if err := db.QueryRowContext(ctx, l.q.live, leaseMs).Scan(&live); err != nil {
		return fmt.Errorf("count instances: %w", err)
	}
	fair := (cfg.Partitions + max(live, 1) - 1) / max(live, 1)

	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	mine, err := queryInts(ctx, db, l.q.renew, cfg.InstanceID, leaseMs)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	slices.Sort(mine)
	if len(mine) > fair {
		excess := mine[fair:]
		if _, err := db.ExecContext(ctx, l.q.release, cfg.InstanceID, excess); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		mine = mine[:fair]
	} else if len(mine) < fair {
		got, err := queryInts(ctx, db, l.q.acquire, cfg.InstanceID, leaseMs, fair-len(mine), cfg.Partitions)
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if len(got) > 0 {
			l.r.log.Info("partition leases taken", "partitions", got)
			defer l.r.Wake()
		}
		mine = append(mine, got...)
	}
	clear(l.until)
	for _, p := range mine {
		l.until[p] = sent.Add(cfg.LeaseDuration)
	}
	return nil
}

// usable returns the partitions a batch may work on now (those with more than
// 1.25 PublishTimeout of lease left, and in worker's share: p mod of = worker)
// and the end of the earliest of their leases.
func (l *leases) usable(worker, of int) ([]int32, time.Time) {
	limit := time.Now().Add(l.r.cfg.PublishTimeout + l.r.cfg.PublishTimeout/4)
	var (
		out   []int32
		first time.Time
	)
	for p, until := range l.until {
		if p%of == worker && until.After(limit) {
			out = append(out, int32(p))
			if first.IsZero() || until.Before(first) {
				first = until
			}
		}
	}
	return out, first
}

func queryInts(ctx context.Context, db execer, q string, args ...any) ([]int, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// cycleOrdered works one batch of this instance's partitions: the due events in
// commit order, each aggregate's in sequence (aggregates in parallel), a failure
// holding back the rest of its aggregate.
func (r *Relay) cycleOrdered(ctx context.Context, worker, of int) (int, error) {
	l := r.leases
	l.mu.RLock()
	defer l.mu.RUnlock()
	parts, until := l.usable(worker, of)
	if len(parts) == 0 {
		return 0, nil
	}
	// No Publish call starts later than PublishTimeout (and a margin) before the
	// first of these leases ends: the batch is over before another instance could
	// take one of its partitions.
	bctx, startBy, cancel := r.batchContexts(ctx, until.Add(-r.cfg.PublishTimeout-r.cfg.PublishTimeout/4))
	defer cancel()
	rows, err := claim(bctx, r.db, r.q.claimOrdered, r.cfg.BatchSize, r.cfg.Partitions, parts)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	out := &outcome{}
	var (
		units []([]*row)
		byAgg = map[string]int{}
	)
	for _, rw := range rows {
		key := rw.aggType + "\x00" + rw.aggID
		if rw.aggID == "" {
			key = rw.id
		}
		i, ok := byAgg[key]
		if !ok {
			i = len(units)
			byAgg[key] = i
			units = append(units, nil)
		}
		units[i] = append(units[i], rw)
	}
	// Rows that cannot become messages go dead at once and release the rest.
	for i, u := range units {
		for j, rw := range u {
			if rw.err != nil {
				out.add(rw, result{err: rw.err})
				units[i] = u[:j]
				break
			}
		}
	}
	r.publishOrdered(startBy, units, out)
	tx, err := r.db.BeginTx(bctx, nil)
	if err != nil {
		return len(rows), fmt.Errorf("begin marks: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	return len(rows), r.commitMarks(bctx, tx, out)
}
