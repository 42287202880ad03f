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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/outbound"
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
	keep        time.Duration // relays' Retention (not with partitions): published rows kept for the ledger
	slowSave    time.Duration // a save slower than this counts as held back
	judgedSaves bool          // slow or failed saves fail the run
}

// saveStats times the writers' saves.
type saveStats struct {
	mu      sync.Mutex
	n, slow int64
	slowest time.Duration
	// slowSaves are when the slow ones began and ended.
	slowSaves [][2]time.Time
	// frozen are the slow saves not counted: they waited on a relay frozen
	// while it held SQLite's write lock (host.settleSaves).
	frozen int64
	// quiet are the slow saves not counted on PostgreSQL and MySQL: no
	// sample during them saw a writer wait (host.settleQuietSaves).
	quiet int64
	skip  func(began, ended time.Time) bool // a save then is not Herald's to answer for
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
		s.slowSaves = append(s.slowSaves, [2]time.Time{began, began.Add(d)})
	}
	s.slowest = max(s.slowest, d)
}

// exempt removes the slow saves for which not returns true from the slow
// ones and their count, and returns how many it removed.
func (s *saveStats) exempt(not func(span [2]time.Time) bool) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept [][2]time.Time
	n := int64(0)
	for _, span := range s.slowSaves {
		if not(span) {
			n++
		} else {
			kept = append(kept, span)
		}
	}
	s.slow -= n
	s.slowSaves = kept
	return n
}

// slowOnes is a copy of the slow saves' spans.
func (s *saveStats) slowOnes() [][2]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.slowSaves)
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
	wrongDead                atomic.Int64 // dead events not poisoned, seen by the operator before a requeue
	waits                    dbWaits      // PostgreSQL, MySQL: the writers' waits, sampled
	mu                       sync.Mutex
	freezes                  []freeze // the relays' pauses, when they ended
	opErrs                   atomic.Int64
}

// longTransaction opens one transaction at start, writes into it for
// o.longTx (or until ctx ends) new accounts with ten events each, ten
// accounts every 100ms (two on SQLite, where the transaction holds the one
// write lock all along and every other writer, the consumers' too, waits for
// it), and commits; the ledger books its events by the outcome.
func (h *host) longTransaction(ctx context.Context, start time.Duration) {
	if h.o.longTx <= 0 || !outbound.Sleep(ctx, start) {
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
	for outbound.Sleep(ctx, h.o.holdEvery/2+rand.N(h.o.holdEvery)) {
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
	outbound.Sleep(ctx, h.o.holdFor)
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
	for i := 0; outbound.Sleep(ctx, h.o.operator); i++ {
		var (
			n   int64
			err error
		)
		if i%4 != 3 {
			h.noteDead(ctx)
		}
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

// noteDead counts and prints, before a requeue, the dead events the operator
// sees that were not poisoned (their last error is not the poisoned
// refusal): a wrong death, which the requeue would hide from the final
// ledger, the later versions of its account published before it.
func (h *host) noteDead(ctx context.Context) {
	dead, err := h.adm.Dead(ctx, admin.DeadFilter{}, 1000)
	if err != nil {
		return
	}
	for _, d := range dead {
		if !strings.Contains(d.LastError, poisonedText) {
			h.wrongDead.Add(1)
			fmt.Fprintf(os.Stderr, "chaos: operator: event %s (%s version %d) dead, not poisoned: %d attempts, %d strikes, last error %q\n",
				d.ID, d.Aggregate(), d.Version, d.Attempts, d.Strikes, d.LastError)
		}
	}
}

// deathsOK reports whether the operator saw no wrong death.
func (h *host) deathsOK() bool { return h.wrongDead.Load() == 0 }

// pauseLoop stops a random relay process with SIGSTOP every o.pauseEvery for
// 1.5 times its lease, then resumes it with SIGCONT.
func (h *host) pauseLoop(ctx context.Context, lease time.Duration) {
	if h.o.pauseEvery <= 0 || len(h.relays) == 0 {
		return
	}
	for outbound.Sleep(ctx, h.o.pauseEvery/2+rand.N(h.o.pauseEvery)) {
		c := h.relays[rand.IntN(len(h.relays))]
		pid := c.pid()
		if !c.signal(syscall.SIGSTOP) {
			continue
		}
		from := time.Now()
		h.pauses.Add(1)
		time.Sleep(lease * 3 / 2)
		c.signal(syscall.SIGCONT)
		h.mu.Lock()
		h.freezes = append(h.freezes, freeze{pid: pid, from: from, to: time.Now()})
		h.mu.Unlock()
	}
}

// freeze is a relay process stopped by SIGSTOP, from..to.
type freeze struct {
	pid      int
	from, to time.Time
}

// pid is the child's current process id (0: none).
func (c *child) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// frozenHolds are the spans in which a relay held SQLite's write lock while
// SIGSTOP froze it: every other writer waits them out, by SQLite's design
// (one write lock, which no timeout takes from its holder).
func (h *host) frozenHolds(hs []hold) [][2]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][2]time.Time
	for _, f := range h.freezes {
		for _, hd := range hs {
			if hd.pid != f.pid {
				continue
			}
			if from, to := maxTime(hd.began, f.from), minTime(hd.ended, f.to); to.After(from) {
				out = append(out, [2]time.Time{from, to})
			}
		}
	}
	return out
}

// holdSummary counts, by role, the transactions that held SQLite's write
// lock 50ms or more and their longest, but for a frozen relay's.
func (h *host) holdSummary(hs []hold) string {
	by := h.holdsByRole(hs)
	if len(by) == 0 {
		return "none"
	}
	var parts []string
	for who, a := range by {
		parts = append(parts, fmt.Sprintf("%s %d, %v", who, a.n, a.longest.Round(time.Millisecond)))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// roleHolds are one role's transactions that held SQLite's write lock for
// lockLogMin or more: how many, the longest.
type roleHolds struct {
	n       int
	longest time.Duration
}

// holdsByRole sums the transactions' holdings of the write lock by role,
// but for those of a relay frozen (SIGSTOP) meanwhile: a statement's time
// includes its wait, and is left out.
func (h *host) holdsByRole(hs []hold) map[string]*roleHolds {
	h.mu.Lock()
	fz := slices.Clone(h.freezes)
	h.mu.Unlock()
	by := map[string]*roleHolds{}
	for _, hd := range hs {
		if !strings.HasPrefix(hd.what, "transaction") {
			continue
		}
		frozen := false
		for _, f := range fz {
			if f.pid == hd.pid && hd.began.Before(f.to) && hd.ended.After(f.from) {
				frozen = true
			}
		}
		if frozen {
			continue
		}
		who := role(hd.who)
		if by[who] == nil {
			by[who] = &roleHolds{}
		}
		by[who].n++
		by[who].longest = max(by[who].longest, hd.ended.Sub(hd.began))
	}
	return by
}

// heraldHoldsOK reports, on SQLite with judged saves, whether Herald's
// transactions (the relays', and the consumers' inbox transactions) each
// held the write lock for less than a slow save, frozen relays excepted.
// SQLite has one write lock and no queue for it: a writer waits by polling
// (its busy handler sleeps up to 100ms between tries), and with relays in
// other processes a save can wait past a second behind several short
// transactions, or behind a process stopped while it holds the lock, which
// no library can end. What Herald answers for there is its own holdings:
// short, and never across a publish.
func (h *host) heraldHoldsOK() bool {
	if h.kind != sqliteDB || !h.o.judgedSaves {
		return true
	}
	for who, a := range h.holdsByRole(readHolds(lockDir)) {
		if (who == "chaos_relay" || who == "chaos_consumer") && a.longest >= h.o.slowSave {
			return false
		}
	}
	return true
}

// settleSaves takes out of the slow saves' count those that are not
// Herald's to answer for. On SQLite: those that waited on a frozen holder of
// the write lock (frozenHolds), as those that overlap the long transaction or
// a burst are. On PostgreSQL and MySQL: those during which the sampler
// (waitLoop, every 100ms) saw no writer wait, in 5 samples or more, but on
// other writers (onWriters): no lock of Herald's held them back (a lock wait
// shows in every sample it spans), the machine's load did. Both are counted apart and shown.
func (h *host) settleSaves(saves *saveStats) {
	if h.kind != sqliteDB {
		n := saves.exempt(func(s [2]time.Time) bool { return h.waits.quiet(s[0], s[1], 5) })
		saves.mu.Lock()
		saves.quiet = n
		saves.mu.Unlock()
		return
	}
	if len(saves.slowOnes()) == 0 {
		return
	}
	fz := h.frozenHolds(readHolds(lockDir))
	n := saves.exempt(func(s [2]time.Time) bool {
		return slices.ContainsFunc(fz, func(f [2]time.Time) bool { return s[0].Before(f[1]) && s[1].After(f[0]) })
	})
	saves.mu.Lock()
	saves.frozen = n
	saves.mu.Unlock()
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

// explainSlow prints, for each slow save, to stderr: on SQLite who held the
// write lock while it waited (locks.go); on PostgreSQL and MySQL the
// writers' waits and the load sampled meanwhile (waits.go).
func (h *host) explainSlow(saves *saveStats) {
	if h.kind == postgresDB || h.kind == mysqlDB {
		for _, s := range saves.slowOnes() {
			fmt.Fprintf(os.Stderr, "chaos: slow save %s, %v: %s\n", s[0].Format("15:04:05.000"),
				s[1].Sub(s[0]).Round(time.Millisecond), h.waits.during(s[0], s[1]))
		}
		return
	}
	if h.kind != sqliteDB {
		return
	}
	ss := saves.slowOnes()
	if len(ss) == 0 {
		return
	}
	hs := readHolds(lockDir)
	for _, s := range ss {
		fmt.Fprintf(os.Stderr, "chaos: slow save %s, %v: %s\n", s[0].Format("15:04:05.000"),
			s[1].Sub(s[0]).Round(time.Millisecond), lockHolders(hs, s[0], s[1]))
	}
}

// rows adds the host's rows to the table.
func (h *host) rows(row func(string, any), saves *saveStats) {
	n, slow, slowest := saves.get()
	label := fmt.Sprintf("application saves slower than %v, of all (slowest)", h.o.slowSave)
	if h.kind == sqliteDB && h.o.longTx > 0 {
		label += "; not counted if they overlap the long transaction or a burst's, which hold SQLite's one write lock"
	}
	row(label, fmt.Sprintf("%d of %d (%v)", slow, n, slowest.Round(time.Millisecond)))
	if h.kind != sqliteDB && h.o.judgedSaves {
		saves.mu.Lock()
		quiet := saves.quiet
		saves.mu.Unlock()
		row("slow saves not counted: no sample during them (5 or more, every 100ms) saw a writer wait but on other writers, the machine's load held them", quiet)
	}
	if h.kind == sqliteDB && h.o.pauseEvery > 0 {
		saves.mu.Lock()
		frozen := saves.frozen
		saves.mu.Unlock()
		row("slow saves not counted: they waited on a relay frozen (SIGSTOP) while it held SQLite's write lock", frozen)
	}
	if h.kind == sqliteDB {
		label := "SQLite's write lock held 50ms or more, by role: times, longest (frozen relays' excepted)"
		if h.o.judgedSaves {
			label += fmt.Sprintf("; judged on SQLite instead of the saves: the relays' and consumers' each under %v", h.o.slowSave)
		}
		row(label, h.holdSummary(readHolds(lockDir)))
	}
	if h.kind == sqliteDB && slow > 0 {
		row("who held SQLite's write lock during the slow saves (overlap, by role)", holdersSummary(readHolds(lockDir), saves.slowOnes()))
	}
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
		row("operator: dead events seen that were not poisoned (must be 0)", h.wrongDead.Load())
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

// savesOK reports whether the saves pass, when judged: none slow; on SQLite,
// none of Herald's transactions held the write lock as long (heraldHoldsOK),
// the saves shown.
func (h *host) savesOK(saves *saveStats) bool {
	if h.kind == sqliteDB {
		return h.heraldHoldsOK()
	}
	_, slow, _ := saves.get()
	return !h.o.judgedSaves || slow == 0
}
