package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// reminderDue is the event the scheduled benchmarks schedule (no aggregate:
// outboxhook.Schedule).
type reminderDue struct {
	I   int    `json:"i"`
	Pad string `json:"pad"`
}

func (reminderDue) EventType() string { return "reminder.due" }

var reminderPad = strings.Repeat("x", 100)

// usePlugin registers the outbox plugin on db with cfg unless it already is.
func usePlugin(db *gorm.DB, cfg outboxhook.Config) error {
	if _, ok := db.Config.Plugins[outboxhook.Name]; ok {
		return nil
	}
	return db.Use(outboxhook.New(cfg))
}

// loadScheduled writes n events due after (an hour, say) through the write
// path (outboxhook.Schedule: the scheduled insert, due_at and available_at
// by the database's clock, schedule_key ”), 1,000 per transaction.
func loadScheduled(db *gorm.DB, n int, after time.Duration) error {
	if err := usePlugin(db, outboxhook.Config{}); err != nil {
		return err
	}
	for i := 0; i < n; i += 1000 {
		evs := make([]events.Event, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			evs = append(evs, reminderDue{I: j, Pad: reminderPad})
		}
		if err := db.Transaction(func(tx *gorm.DB) error { return outboxhook.Schedule(tx, events.After(after), evs...) }); err != nil {
			return err
		}
	}
	return nil
}

// runScheduleLatency measures due->publish latency of scheduled events: the
// writers schedule events at a steady rate, each due -delay later, so that
// as many come due per second; a relay in this process (woken by the hook's
// Notify, or not with -wake=false) publishes them to GoChannel, whose
// subscriber takes the receipt time less the message's herald_due_at (both
// this machine's clock: the database runs here).
func runScheduleLatency(fs *flag.FlagSet, args []string) error {
	dbName := fs.String("db", "postgres", "database: postgres, sqlite or mysql")
	rate := fs.Int("rate", 1000, "events scheduled per second, all writers together (as many come due per second)")
	delay := fs.Duration("delay", 2*time.Second, "how long after its save each event is due")
	dur := fs.Duration("duration", 10*time.Second, "how long to write (the events of the first -warmup are not counted)")
	warmup := fs.Duration("warmup", time.Second, "events written in the first this long are published but not counted")
	writers := fs.Int("writers", 8, "writer goroutines")
	poll := fs.Duration("poll", 0, "relay PollInterval (0: the default, 1s)")
	wake := fs.Bool("wake", true, "wire the hook's Notify to the relay's Wake (a relay in the writer's process); false: a relay that is never woken (another process without LISTEN/NOTIFY)")
	ordered := fs.Bool("ordered", false, "ordered relay")
	rounds := fs.Int("rounds", 1, "runs, one after the other (each in a fresh database)")
	reference := fs.Bool("reference", true, "in each round, first the same writes unscheduled (outboxhook.Add), for the CPU per event of the ordinary path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bdb, err := pickDB(*dbName)
	if err != nil {
		return err
	}
	pollShown := "default (1s)"
	if *poll > 0 {
		pollShown = poll.String()
	}
	mode := "unordered"
	if *ordered {
		mode = "ordered"
	}
	fmt.Printf("Due->publish latency of scheduled events on %s: %d events/s scheduled %s ahead by %d writers for %s (first %s not counted), "+
		"relay in this process (%s, woken by the hook: %v, PollInterval %s) to GoChannel\n\n",
		bdb.name, *rate, *delay, *writers, *dur, *warmup, mode, *wake, pollShown)
	fmt.Println("| run | written/s | events counted | p50 | p90 | p99 | max | min | published before due | CPU per event: all (this process + database) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var cpuRatios []float64
	for round := range *rounds {
		ref := schedLatResult{}
		if *reference {
			ref, err = scheduleLatencyRun(bdb, *rate, *delay, *dur, *warmup, *writers, *poll, *wake, *ordered, true)
			if err != nil {
				return err
			}
			fmt.Printf("| %d: reference, the same writes unscheduled (outboxhook.Add) | %.0f | - | - | - | - | - | - | - | %.1f µs (%.1f + %.1f) |\n", round+1,
				ref.rate, us(ref.cpu.total()), us(ref.cpu.self), us(ref.cpu.db))
		}
		res, err := scheduleLatencyRun(bdb, *rate, *delay, *dur, *warmup, *writers, *poll, *wake, *ordered, false)
		if err != nil {
			return err
		}
		if ref.cpu.total() > 0 {
			cpuRatios = append(cpuRatios, float64(res.cpu.total())/float64(ref.cpu.total()))
		}
		l := res.lats
		slices.Sort(l)
		fmt.Printf("| %d: scheduled | %.0f | %d | %s | %s | %s | %s | %s | %d | %.1f µs (%.1f + %.1f) |\n", round+1, res.rate, len(l), ms(pct(l, .5)), ms(pct(l, .9)), ms(pct(l, .99)),
			ms(l[len(l)-1]), ms(l[0]), res.early, us(res.cpu.total()), us(res.cpu.self), us(res.cpu.db))
	}
	if len(cpuRatios) > 0 {
		fmt.Printf("\nCPU per event, scheduled / unscheduled reference, per round: %s (median %.0f%%)\n", pcts(cpuRatios), 100*medianF(cpuRatios))
	}
	return nil
}

type schedLatResult struct {
	lats  []time.Duration // counted events' receipt - due, sorted by the caller
	early int             // counted events received before their due time
	cpu   cpuUse          // per event written
	rate  float64         // events written per second (the writers may fall behind -rate)
}

func scheduleLatencyRun(bdb benchDB, rate int, delay, dur, warmup time.Duration, writers int, poll time.Duration, wake, ordered, immediate bool) (schedLatResult, error) {
	var res schedLatResult
	dsn, drop, err := bdb.scratch()
	if err != nil {
		return res, err
	}
	defer drop()
	db, err := bdb.open(dsn)
	if err != nil {
		return res, err
	}
	defer closeGorm(db)
	var notify atomic.Pointer[func()]
	if err := db.Use(outboxhook.New(outboxhook.Config{Notify: func() {
		if f := notify.Load(); f != nil {
			(*f)()
		}
	}})); err != nil {
		return res, err
	}
	topic := "reminder.due" // the hook's default topic: the event type
	gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1 << 17}, watermill.NopLogger{})
	defer func() { _ = gc.Close() }()
	ch, err := gc.Subscribe(context.Background(), topic)
	if err != nil {
		return res, err
	}
	type receipt struct{ due, at time.Time }
	var (
		mu       sync.Mutex
		receipts []receipt
		got      atomic.Int64
	)
	go func() {
		for m := range ch {
			now := time.Now()
			if due, ok := events.DueAt(m.Metadata); ok {
				mu.Lock()
				receipts = append(receipts, receipt{due, now})
				mu.Unlock()
			}
			got.Add(1)
			m.Ack()
		}
	}()
	r, err := relay.New(db, gc, relay.Config{PollInterval: poll, Ordered: ordered, Logger: discardLogger()})
	if err != nil {
		return res, err
	}
	if wake {
		f := r.Wake
		notify.Store(&f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var relayWG sync.WaitGroup
	relayWG.Add(1)
	go func() { defer relayWG.Done(); _ = r.Run(ctx) }()
	defer func() { cancel(); relayWG.Wait() }()
	time.Sleep(500 * time.Millisecond) // the relay started

	cpu0 := machineCPU()
	var (
		wmu     sync.Mutex
		written int
		werr    error
		wg      sync.WaitGroup
	)
	interval := time.Duration(float64(time.Second) * float64(writers) / float64(rate))
	start := time.Now()
	deadline := start.Add(dur)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(interval * time.Duration(w) / time.Duration(writers)) // spread the writers' phases
			t := time.NewTicker(interval)
			defer t.Stop()
			for i := 0; time.Now().Before(deadline); i++ {
				<-t.C
				// One event, one statement (no transaction of the caller's).
				ev := reminderDue{I: w*1_000_000 + i, Pad: reminderPad}
				var err error
				if immediate {
					err = outboxhook.Add(db, ev)
				} else {
					err = outboxhook.Schedule(db, events.After(delay), ev)
				}
				wmu.Lock()
				if err != nil {
					werr = err
				} else {
					written++
				}
				wmu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	res.rate = float64(written) / time.Since(start).Seconds()
	if werr != nil {
		return res, werr
	}
	// Wait for everything written to be published: the last is due delay
	// after the end; a relay not woken may poll once more.
	limit := time.Now().Add(delay + max(poll, time.Second) + 10*time.Second)
	for got.Load() < int64(written) && time.Now().Before(limit) {
		time.Sleep(20 * time.Millisecond)
	}
	res.cpu = machineCPU().sub(cpu0).per(written)
	cancel()
	relayWG.Wait()
	if n := got.Load(); n < int64(written) {
		return res, fmt.Errorf("%d of %d events published", n, written)
	}
	// Counted: the events written after the warm-up (due after it, by
	// their due time less the delay).
	from := start.Add(warmup + delay)
	mu.Lock()
	defer mu.Unlock()
	for _, rc := range receipts {
		if rc.due.Before(from) {
			continue
		}
		l := rc.at.Sub(rc.due)
		if l < 0 {
			res.early++
		}
		res.lats = append(res.lats, l)
	}
	if len(res.lats) == 0 && !immediate {
		return res, errors.New("no event counted")
	}
	return res, nil
}

// openCapture opens GORM on dsn through the capturing driver of bdb's
// database/sql driver.
func openCapture(bdb benchDB, dsn string) (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true}
	switch bdb.name {
	case "postgres":
		d, err := captureDriver("pgx")
		if err != nil {
			return nil, err
		}
		return gorm.Open(postgres.New(postgres.Config{DriverName: d, DSN: dsn}), cfg)
	case "mysql":
		d, err := captureDriver("mysql")
		if err != nil {
			return nil, err
		}
		return gorm.Open(mysql.New(mysql.Config{DriverName: d, DSN: dsn}), cfg)
	case "sqlite":
		d, err := captureDriver("sqlite")
		if err != nil {
			return nil, err
		}
		return gorm.Open(sqlite.New(sqlite.Config{DriverName: d, DSN: dsn}), cfg)
	}
	return nil, fmt.Errorf("no capture for %s", bdb.name)
}

// claimStatement is a distinct claim statement the relay ran, with the
// arguments of its first and last run.
type claimStatement struct {
	query       string
	first, last []any
	runs        int
}

// claimStatements are the statements of log that claim due events (they
// compare available_at with the clock), in the order first run.
func claimStatements(log []captured) []*claimStatement {
	var out []*claimStatement
	by := map[string]*claimStatement{}
	for _, c := range log {
		if !strings.Contains(c.query, "available_at <=") || strings.HasPrefix(strings.TrimSpace(c.query), "EXPLAIN") {
			continue
		}
		args := make([]any, len(c.args))
		for i, a := range c.args {
			args[i] = a.Value
		}
		s := by[c.query]
		if s == nil {
			s = &claimStatement{query: c.query, first: args}
			by[c.query] = s
			out = append(out, s)
		}
		s.last = args
		s.runs++
	}
	return out
}

// explainClaims loads sched events scheduled after ahead and n due events
// into a fresh database, lets a relay (unordered, then ordered) publish a few
// batches through the capturing driver, and prints the database's plan of
// each claim statement it ran, with the arguments of its first and its last
// run: PostgreSQL EXPLAIN (ANALYZE, BUFFERS) (run in a transaction rolled
// back: a custom plan for these arguments; the relay's prepared statement
// may use a generic plan after five runs), MariaDB ANALYZE FORMAT=JSON
// (MySQL EXPLAIN ANALYZE), SQLite EXPLAIN QUERY PLAN.
func explainClaims(bdb benchDB, n, sched int, ahead time.Duration) error {
	dsn, drop, err := bdb.scratch()
	if err != nil {
		return err
	}
	defer drop()
	db, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(db)
	t0 := time.Now()
	if err := loadScheduled(db, sched, ahead); err != nil {
		return err
	}
	took := time.Since(t0)
	if err := loadOutbox(db, n, "bench.explain"); err != nil {
		return err
	}
	fmt.Printf("### Claim plans on %s with %d events scheduled %s ahead (written in %.1f s) below %d due events\n\n", bdb.name, sched, ahead, took.Seconds(), n)
	for _, ordered := range []bool{false, true} {
		log, err := captureRelay(bdb, dsn, relay.Config{Ordered: ordered}, min(3000, n/2))
		if err != nil {
			return err
		}
		mode := "unordered"
		if ordered {
			mode = "ordered"
		}
		// The plans from a connection opened now: SQLite's EXPLAIN QUERY
		// PLAN reads the connection's cached schema, which the load's
		// connection took before the relay made its indexes.
		edb, err := bdb.open(dsn)
		if err != nil {
			return err
		}
		sqlDB, _ := edb.DB()
		if bdb.name == "postgres" {
			seqScans(sqlDB, mode, log)
		}
		for _, s := range claimStatements(log) {
			fmt.Printf("#### %s relay: claim statement run %d times\n\n```sql\n%s\n```\n\n", mode, s.runs, s.query)
			for _, which := range []struct {
				name string
				args []any
			}{{"first run's arguments", s.first}, {"last run's arguments", s.last}} {
				if which.name != "first run's arguments" && s.runs == 1 {
					continue
				}
				plan, err := explain(sqlDB, bdb.name, s.query, which.args)
				if err != nil {
					plan = "explain failed: " + err.Error()
				}
				fmt.Printf("%s %v:\n\n```\n%s\n```\n\n", which.name, shortArgs(which.args), plan)
			}
		}
		closeGorm(edb)
	}
	return nil
}

func shortArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		s := fmt.Sprint(a)
		if len(s) > 60 {
			s = s[:60] + "…"
		}
		parts[i] = s
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// explain returns the database's plan of query run with args, in a
// transaction it rolls back.
func explain(db *sql.DB, dbName, query string, args []any) (string, error) {
	return explainIn(db, dbName, nil, query, args)
}

// explainIn is explain in a transaction begun with opts.
func explainIn(db *sql.DB, dbName string, opts *sql.TxOptions, query string, args []any) (string, error) {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	var prefix string
	switch dbName {
	case "postgres":
		prefix = "EXPLAIN (ANALYZE, BUFFERS) "
	case "mysql":
		var v string
		if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			return "", err
		}
		prefix = "EXPLAIN ANALYZE "
		if strings.Contains(strings.ToLower(v), "mariadb") {
			prefix = "ANALYZE FORMAT=JSON "
		}
	case "sqlite":
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := tx.QueryContext(ctx, prefix+query, args...)
	if err != nil {
		return "", err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		if dbName == "sqlite" { // id, parent, notused, detail
			fmt.Fprintf(&b, "%s (id %s, parent %s)\n", vals[len(vals)-1].String, vals[0].String, vals[1].String)
			continue
		}
		for _, v := range vals {
			b.WriteString(v.String)
		}
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String()), rows.Err()
}

// tableReads is what PostgreSQL's statistics say was read of the outbox
// table (its own schema: no other process reads it): rows fetched by index
// and by sequential scans, and buffers of the table and its indexes.
type tableReads struct{ idxFetch, seqRead, heapBlks, idxBlks int64 }

func outboxReads(db *gorm.DB) (tableReads, bool) {
	if db.Dialector.Name() != "postgres" {
		return tableReads{}, false
	}
	var t tableReads
	err := db.Raw(`SELECT coalesce(s.idx_tup_fetch, 0), coalesce(s.seq_tup_read, 0),
  coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0), coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)
FROM pg_stat_user_tables s JOIN pg_statio_user_tables io USING (relid)
WHERE s.schemaname = current_schema() AND s.relname = 'outbox_messages'`).Row().Scan(&t.idxFetch, &t.seqRead, &t.heapBlks, &t.idxBlks)
	return t, err == nil
}

// scheduledBurn is one scenario of the scheduled burn-down: Herald's relay
// in a mode, with sched events scheduled ahead below the due ones.
type scheduledBurn struct {
	ordered bool
	sched   int
}

func (s scheduledBurn) name() string {
	mode := "unordered"
	if s.ordered {
		mode = "ordered (1 relay)"
	}
	return fmt.Sprintf("Herald relay, %s, %d scheduled", mode, s.sched)
}

type burnResult struct {
	rate     float64
	cpu      cpuUse
	reads    tableReads // per 1000 events (PostgreSQL)
	hasReads bool
	load     time.Duration // writing the scheduled events
	times    map[string]*stmtTime
}

// topStatements prints the relay's statements that took the most time.
func topStatements(times map[string]*stmtTime, k int) {
	type row struct {
		q string
		t *stmtTime
	}
	var rows []row
	for q, t := range times {
		rows = append(rows, row{q, t})
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.t.total - a.t.total) })
	for _, r := range rows[:min(k, len(rows))] {
		q := strings.Join(strings.Fields(r.q), " ")
		if len(q) > 150 {
			q = q[:150] + "…"
		}
		fmt.Printf("  - %d runs, %.0f ms in all, mean %.2f ms, max %.1f ms: `%s`\n", r.t.n, float64(r.t.total)/1e6,
			float64(r.t.total)/1e6/float64(r.t.n), float64(r.t.max)/1e6, q)
	}
}

// runScheduledBurn is relay -scheduled: the burn-down of n due events by
// Herald's relay, unordered and ordered, each with no scheduled event and
// with sched events scheduled ahead written before the due ones (lower seq),
// the four scenarios side by side in each round (in a new order each round),
// to the first publisher; then the per-round ratios and their medians, and
// the claims' plans with the scheduled events present.
func runScheduledBurn(bdb benchDB, n, sched int, ahead time.Duration, pubKind string, rounds int, only string, cfg relay.Config, doExplain bool) error {
	scens := []scheduledBurn{{false, 0}, {false, sched}, {true, 0}, {true, sched}}
	if only != "" {
		scens = slices.DeleteFunc(scens, func(s scheduledBurn) bool {
			return !slices.ContainsFunc(strings.Split(only, "|"), func(o string) bool { return strings.Contains(s.name(), o) })
		})
	}
	res := map[scheduledBurn][]burnResult{}
	for round := range rounds {
		order := slices.Clone(scens)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		fmt.Printf("Round %d of %d: burn-down of %d due events on %s, publisher %s\n\n", round+1, rounds, n, bdb.name, pubKind)
		fmt.Println("| scenario | events/s | time | CPU per event: all (relay + database) | outbox rows fetched / 1000 events (idx + seq) | buffers / 1000 events (table + indexes) | writing the scheduled events |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
		for _, s := range order {
			r, err := scheduledBurnRun(bdb, n, s, ahead, pubKind, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name(), err)
			}
			res[s] = append(res[s], r)
			reads := "-"
			bufs := "-"
			if r.hasReads {
				reads = fmt.Sprintf("%d + %d", r.reads.idxFetch, r.reads.seqRead)
				bufs = fmt.Sprintf("%d + %d", r.reads.heapBlks, r.reads.idxBlks)
			}
			load := "-"
			if s.sched > 0 {
				load = fmt.Sprintf("%.1f s (%.0f/s)", r.load.Seconds(), float64(s.sched)/r.load.Seconds())
			}
			fmt.Printf("| %s | %.0f | %.2f s | %.1f µs (%.1f + %.1f) | %s | %s | %s |\n", s.name(), r.rate, float64(n)/r.rate,
				us(r.cpu.total()), us(r.cpu.self), us(r.cpu.db), reads, bufs, load)
			fmt.Fprintf(os.Stderr, "round %d %s: %.0f events/s\n", round+1, s.name(), r.rate)
		}
		fmt.Println("\nThe relay's statements that took the most time (client side, until the first rows):")
		for _, s := range order {
			fmt.Printf("\n- %s:\n", s.name())
			topStatements(res[s][len(res[s])-1].times, 4)
		}
		fmt.Println()
	}
	fmt.Printf("Summary on %s (%d due events, %d rounds): with %d scheduled / with none, per round (same round's pair), and median\n\n", bdb.name, n, rounds, sched)
	fmt.Println("| mode | rate per round | rate median | CPU per event per round | CPU median |")
	fmt.Println("|---|---|---:|---|---:|")
	for _, ordered := range []bool{false, true} {
		none, with := res[scheduledBurn{ordered, 0}], res[scheduledBurn{ordered, sched}]
		if len(none) == 0 || len(with) == 0 {
			continue
		}
		var rates, cpus []float64
		for i := range min(len(none), len(with)) {
			rates = append(rates, with[i].rate/none[i].rate)
			cpus = append(cpus, float64(with[i].cpu.total())/float64(none[i].cpu.total()))
		}
		mode := "unordered"
		if ordered {
			mode = "ordered"
		}
		fmt.Printf("| %s | %s | %.0f%% | %s | %.0f%% |\n", mode, pcts(rates), 100*medianF(rates), pcts(cpus), 100*medianF(cpus))
	}
	fmt.Println("\n(rate: goal >= 90%; CPU: with / none, lower is better)")
	fmt.Println()
	if doExplain {
		return explainClaims(bdb, n, sched, ahead)
	}
	return nil
}

func scheduledBurnRun(bdb benchDB, n int, s scheduledBurn, ahead time.Duration, pubKind string, cfg relay.Config) (burnResult, error) {
	var res burnResult
	dsn, drop, err := bdb.scratch()
	if err != nil {
		return res, err
	}
	defer drop()
	topic := fmt.Sprintf("bench.sched.%d", time.Now().UnixNano())
	db, err := bdb.open(dsn)
	if err != nil {
		return res, err
	}
	if premigrate {
		// Every object of Herald's (the relay's indexes too) made before
		// the load: the relay's start does not build an index over the
		// loaded rows inside the timed burn-down.
		if _, err := migrations.Migrate(context.Background(), db); err != nil {
			closeGorm(db)
			return res, err
		}
	}
	if s.sched > 0 {
		t0 := time.Now()
		if err := loadScheduled(db, s.sched, ahead); err != nil {
			closeGorm(db)
			return res, err
		}
		res.load = time.Since(t0)
	}
	if err := loadOutbox(db, n, topic); err != nil {
		closeGorm(db)
		return res, err
	}
	if err := settleLoad(db); err != nil {
		closeGorm(db)
		return res, err
	}
	// -settle: the database's background work for the load (page
	// flushing, purge) done before the timed burn-down.
	time.Sleep(settle)
	closeGorm(db) // its sessions end: their statistics are flushed
	reads0, hasReads := statsReads(bdb, dsn)
	pub, closePub, err := target(pubKind, topic)
	if err != nil {
		return res, err
	}
	defer closePub()
	cp := &countingPublisher{Publisher: pub, want: int64(n), done: make(chan struct{})}
	// The relay's statements go through the capturing driver (timing only,
	// alike in every scenario): which of them take the time.
	rdb, err := openCapture(bdb, dsn)
	if err != nil {
		return res, err
	}
	if bdb.name != "sqlite" {
		if s, err := rdb.DB(); err == nil {
			s.SetMaxIdleConns(64)
		}
	}
	if err := usePlugin(rdb, outboxhook.Config{}); err != nil {
		closeGorm(rdb)
		return res, err
	}
	cfg.Ordered = s.ordered
	cfg.Logger = discardLogger()
	r, err := relay.New(rdb, cp, cfg)
	if err != nil {
		closeGorm(rdb)
		return res, err
	}
	cpu0 := machineCPU()
	timingStart()
	err = runUntil(r.Run, cp.done)
	res.cpu = machineCPU().sub(cpu0).per(n)
	res.times = timingStop()
	closeGorm(rdb)
	if err != nil {
		return res, err
	}
	res.rate = float64(n) / publishTook.Seconds()
	if hasReads {
		if reads1, ok := statsReads(bdb, dsn); ok {
			per := func(a, b int64) int64 { return (b - a) * 1000 / int64(n) }
			res.reads = tableReads{per(reads0.idxFetch, reads1.idxFetch), per(reads0.seqRead, reads1.seqRead),
				per(reads0.heapBlks, reads1.heapBlks), per(reads0.idxBlks, reads1.idxBlks)}
			res.hasReads = true
		}
	}
	// The n due events drained, the scheduled ones left pending (counted
	// after the statistics above, which the count would add to).
	vdb, err := bdb.open(dsn)
	if err != nil {
		return res, err
	}
	defer closeGorm(vdb)
	return res, verifyDrained(n, cp.n.Load(), vdb, s.sched)
}

// flushTable writes table's dirty pages to disk (MySQL, MariaDB): FLUSH
// TABLES ... FOR EXPORT, in one session, then UNLOCK TABLES.
func flushTable(db *gorm.DB, table string) error {
	sdb, err := db.DB()
	if err != nil {
		return err
	}
	ctx := context.Background()
	conn, err := sdb.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES `"+table+"` FOR EXPORT"); err != nil {
		return fmt.Errorf("flush %s: %w", table, err)
	}
	_, err = conn.ExecContext(ctx, "UNLOCK TABLES")
	return err
}

// vacuumFirst, premigrate, settle: relay -vacuum, -premigrate, -settle.
var (
	vacuumFirst, premigrate = true, true
	settle                  time.Duration
)

// statsReads reads the outbox's statistics (PostgreSQL) in a session of its
// own, once the sessions that ended have flushed theirs.
func statsReads(bdb benchDB, dsn string) (tableReads, bool) {
	if bdb.name != "postgres" {
		return tableReads{}, false
	}
	time.Sleep(300 * time.Millisecond)
	db, err := bdb.open(dsn)
	if err != nil {
		return tableReads{}, false
	}
	defer closeGorm(db)
	return outboxReads(db)
}

// seqScans prints, of the distinct statements on the outbox the relay ran
// (log), those PostgreSQL plans (EXPLAIN, not run) with a sequential scan of
// the outbox, with their arguments of their last run.
func seqScans(db *sql.DB, mode string, log []captured) {
	last := map[string][]any{}
	var order []string
	for _, c := range log {
		if !strings.Contains(c.query, "outbox_messages") {
			continue
		}
		if _, ok := last[c.query]; !ok {
			order = append(order, c.query)
		}
		args := make([]any, len(c.args))
		for i, a := range c.args {
			args[i] = a.Value
		}
		last[c.query] = args
	}
	found := 0
	for _, q := range order {
		head := strings.ToUpper(strings.TrimSpace(q))
		if !strings.HasPrefix(head, "SELECT") && !strings.HasPrefix(head, "WITH") && !strings.HasPrefix(head, "UPDATE") && !strings.HasPrefix(head, "DELETE") {
			continue
		}
		plan, err := explainPlain(db, q, last[q])
		// The outbox itself, not its relay tables (outbox_messages_leases...).
		if err != nil || (!strings.Contains(plan, "Seq Scan on outbox_messages ") && !strings.Contains(plan, "Seq Scan on outbox_messages\n")) {
			continue
		}
		found++
		fmt.Printf("#### %s relay: a statement planned with a sequential scan of the outbox\n\n```sql\n%s\n```\n\n```\n%s\n```\n\n", mode, q, plan)
	}
	fmt.Printf("(%s relay: %d distinct statements on the outbox, %d planned with a sequential scan of it)\n\n", mode, len(order), found)
}

// explainPlain is PostgreSQL's EXPLAIN of query with args (not run).
func explainPlain(db *sql.DB, query string, args []any) (string, error) {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		return "", err
	}
	defer func() { _ = rows.Close() }()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimSpace(b.String()), rows.Err()
}

// settleLoad leaves the outbox just loaded into db as a table that grew over
// time would be, with -vacuum: on PostgreSQL vacuumed and analyzed (the
// visibility map set, the insert-driven autovacuum done, not by an autovacuum
// of the fresh rows during the burn-down, which ran in some runs and not in
// others); on MySQL/MariaDB its pages written out (the load leaves them dirty
// in the buffer pool; the page cleaner's flushing of the fresh rows would
// otherwise run during the burn-down, in the database's CPU and its writes).
func settleLoad(db *gorm.DB) error {
	if !vacuumFirst {
		return nil
	}
	switch db.Dialector.Name() {
	case "postgres":
		return db.Exec(`VACUUM (ANALYZE) outbox_messages`).Error
	case "mysql":
		if err := flushTable(db, "outbox_messages"); err != nil {
			return err
		}
		return purged(db)
	}
	return nil
}

// purged waits (at most a minute) until InnoDB's purge has caught up: the
// delete-marked rows of the scenario before (its burn-down deleted its whole
// backlog) purged, as the claims of this one would otherwise step over them
// in the indexes while purge ran beside them, in some runs more than in others.
func purged(db *gorm.DB) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var name string
		var n int64
		if err := db.Raw("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'").Row().Scan(&name, &n); err != nil {
			return fmt.Errorf("history list length: %w", err)
		}
		if n < 100 {
			return nil
		}
	}
	return nil
}
