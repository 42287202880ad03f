package main

// The host's side of the chaos run (issue 19): what a service around Herald
// does to its database while the relays work, and what it must never feel.
// A writer that keeps one transaction open for a long time writing thousands
// of events over thousands of aggregates; a reader that holds the outbox as
// pg_dump does; an operator who requeues and purges dead events throughout;
// relays paused (SIGSTOP) past their lease and resumed. The writers' saves
// are timed: none may fail or wait more than a second because of Herald.

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
)

// hostOptions are the flags of the host's faults.
type hostOptions struct {
	longTx      time.Duration // how long the long transaction stays open (0: none)
	holdEvery   time.Duration // how often a reader holds the outbox (0: never)
	holdFor     time.Duration // how long it holds it
	operator    time.Duration // how often the operator requeues or purges (0: never)
	pauseEvery  time.Duration // how often a relay is stopped past its lease (0: never)
	relayPool   int           // the relays' MaxOpenConns (0: the driver's default)
	partitions  bool          // PostgreSQL: relays with retention by partition drop
	slowSave    time.Duration // a save slower than this counts as held back
	judgedSaves bool          // slow or failed saves fail the run
}

// saveStats times the writers' saves.
type saveStats struct {
	mu      sync.Mutex
	n, slow int64
	slowest time.Duration
	skip    func(began, ended time.Time) bool // a save then is not Herald's to answer for
}

// add records one save that began at began and took d.
func (s *saveStats) add(began time.Time, d, limit time.Duration) {
	if s.skip != nil && s.skip(began, began.Add(d)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if d > limit {
		s.slow++
	}
	s.slowest = max(s.slowest, d)
}

func (s *saveStats) get() (n, slow int64, slowest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.slow, s.slowest
}

// host runs the host's faults.
type host struct {
	o      hostOptions
	kind   string
	db     *gorm.DB // the writers'
	q      *gorm.DB // the ledger's
	led    *ledger
	adm    *admin.Outbox
	relays []*child

	longEvents, longAccounts atomic.Int64
	longFrom, longTo         atomic.Int64 // when the long transaction was open (Unix ns; longTo 0 while it is)
	longErr                  atomic.Value // string
	holds, pauses            atomic.Int64
	requeued, purged         atomic.Int64
	opErrs                   atomic.Int64
}

// longTransaction opens one transaction at start, writes into it for
// o.longTx (or until ctx ends) new accounts with ten events each, ten
// accounts every 100ms (two on SQLite, where the transaction holds the one
// write lock all along and every other writer, the consumers' too, waits for
// it), and commits; the ledger books its events by the outcome.
func (h *host) longTransaction(ctx context.Context, start time.Duration) {
	if h.o.longTx <= 0 || !sleepCtx(ctx, start) {
		return
	}
	per := 10
	if h.kind == sqliteDB {
		per = 2
	}
	var ids []string
	until := time.Now().Add(h.o.longTx)
	h.longFrom.Store(time.Now().UnixNano())
	defer func() { h.longTo.Store(time.Now().UnixNano()) }()
	err := h.db.Transaction(func(tx *gorm.DB) error {
		for time.Now().Before(until) && ctx.Err() == nil {
			for range per {
				a := &Account{ID: uuid.New()}
				for range 10 {
					a.Version++
					a.Record(Deposited{AccountID: a.ID, Version: a.Version})
				}
				for _, r := range a.Records() {
					ids = append(ids, r.ID.String())
				}
				if err := tx.Create(a).Error; err != nil {
					return err
				}
				h.longAccounts.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
	if h.led.record(ids, err, false) {
		h.longEvents.Add(int64(len(ids)))
	} else if err != nil {
		h.longErr.Store(err.Error())
	}
}

// holdLoop holds the outbox every o.holdEvery for o.holdFor, as a dump does:
// PostgreSQL an ACCESS SHARE lock, MySQL a consistent snapshot that read it
// (a shared metadata lock), SQLite a read transaction.
func (h *host) holdLoop(ctx context.Context) {
	if h.o.holdEvery <= 0 {
		return
	}
	sqlDB, err := h.q.DB()
	if err != nil {
		return
	}
	for sleepCtx(ctx, h.o.holdEvery/2+rand.N(h.o.holdEvery)) {
		if err := h.hold(ctx, sqlDB); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: hold the outbox:", err)
			continue
		}
		h.holds.Add(1)
	}
}

func (h *host) hold(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	var begin []string
	switch h.kind {
	case postgresDB:
		begin = []string{`BEGIN`, `LOCK TABLE outbox_messages IN ACCESS SHARE MODE`}
	case mysqlDB:
		begin = []string{`START TRANSACTION WITH CONSISTENT SNAPSHOT`, `SELECT count(*) FROM outbox_messages`}
	default:
		begin = []string{`BEGIN`, `SELECT count(*) FROM outbox_messages`}
	}
	for _, q := range begin {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
			return err
		}
	}
	sleepCtx(ctx, h.o.holdFor)
	_, err = conn.ExecContext(context.WithoutCancel(ctx), `COMMIT`)
	return err
}

// operatorLoop requeues and purges dead events through the admin API every
// o.operator until ctx ends: requeue all, requeue by type, requeue by id, and
// purge every dead event, in turn.
func (h *host) operatorLoop(ctx context.Context) {
	if h.o.operator <= 0 || h.adm == nil {
		return
	}
	for i := 0; sleepCtx(ctx, h.o.operator); i++ {
		var (
			n   int64
			err error
		)
		switch i % 4 {
		case 0:
			n, err = h.adm.RequeueAll(ctx)
			h.requeued.Add(n)
		case 1:
			n, err = h.adm.RequeueType(ctx, Deposited{}.EventType())
			h.requeued.Add(n)
		case 2:
			var dead []admin.DeadEvent
			if dead, err = h.adm.Dead(ctx, admin.DeadFilter{}, 10); err == nil && len(dead) > 0 {
				ids := make([]uuid.UUID, 0, len(dead))
				for _, d := range dead {
					if id, perr := uuid.Parse(d.ID); perr == nil {
						ids = append(ids, id)
					}
				}
				// Some may have been requeued meanwhile: then none is
				// (admin.ErrNotDead), as the operator's command says.
				n, err = h.adm.Requeue(ctx, ids...)
				h.requeued.Add(n)
			}
		case 3:
			n, err = h.adm.PurgeDead(ctx, 0)
			h.purged.Add(n)
		}
		if err != nil && ctx.Err() == nil {
			h.opErrs.Add(1)
		}
	}
}

// pauseLoop stops a random relay process with SIGSTOP every o.pauseEvery for
// 1.5 times its lease, then resumes it with SIGCONT.
func (h *host) pauseLoop(ctx context.Context, lease time.Duration) {
	if h.o.pauseEvery <= 0 || len(h.relays) == 0 {
		return
	}
	for sleepCtx(ctx, h.o.pauseEvery/2+rand.N(h.o.pauseEvery)) {
		c := h.relays[rand.IntN(len(h.relays))]
		if !c.signal(syscall.SIGSTOP) {
			continue
		}
		h.pauses.Add(1)
		time.Sleep(lease * 3 / 2)
		c.signal(syscall.SIGCONT)
	}
}

// signal sends sig to the child's current process.
func (c *child) signal(sig syscall.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	return c.cmd.Process.Signal(sig) == nil
}

// overlapsLong reports whether [began, ended] overlaps the long transaction.
func (h *host) overlapsLong(began, ended time.Time) bool {
	from, to := h.longFrom.Load(), h.longTo.Load()
	if from == 0 {
		return false
	}
	if to == 0 {
		to = ended.UnixNano()
	}
	return began.UnixNano() <= to && ended.UnixNano() >= from
}

// rows adds the host's rows to the table.
func (h *host) rows(row func(string, any), saves *saveStats) {
	n, slow, slowest := saves.get()
	label := fmt.Sprintf("application saves slower than %v, of all (slowest)", h.o.slowSave)
	if h.kind == sqliteDB && h.o.longTx > 0 {
		label += "; not counted if they overlap the long transaction, which holds SQLite's one write lock"
	}
	row(label, fmt.Sprintf("%d of %d (%v)", slow, n, slowest.Round(time.Millisecond)))
	if h.o.longTx > 0 {
		v := fmt.Sprintf("%d events over %d accounts in one transaction open %v", h.longEvents.Load(), h.longAccounts.Load(), h.o.longTx)
		if e, _ := h.longErr.Load().(string); e != "" {
			v += "; failed: " + e
		}
		row("long transaction", v)
	}
	if h.o.holdEvery > 0 {
		row("outbox held by a reader (as pg_dump)", fmt.Sprintf("%d × %v", h.holds.Load(), h.o.holdFor))
	}
	if h.o.operator > 0 {
		row("operator: events requeued, dead purged, refusals", fmt.Sprintf("%d, %d, %d", h.requeued.Load(), h.purged.Load(), h.opErrs.Load()))
	}
	if h.o.pauseEvery > 0 {
		row("relays stopped (SIGSTOP) for 1.5 leases, then resumed", h.pauses.Load())
	}
	if h.o.relayPool > 0 {
		row("relays' connection pool", h.o.relayPool)
	}
	if h.o.partitions {
		row("relays' retention", "by partition drop")
	}
}

// savesOK reports whether the saves pass: none slow, when judged.
func (h *host) savesOK(saves *saveStats) bool {
	_, slow, _ := saves.get()
	return !h.o.judgedSaves || slow == 0
}
