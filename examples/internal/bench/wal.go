package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// logicalServer is the WAL bench's private PostgreSQL server at
// wal_level=logical (the shared one is at replica): every scenario, of both
// modes, runs in a database of its own on it.
type logicalServer struct {
	srv   *pgtest.PrivateServer
	admin *sql.DB
}

// startLogical starts the private server (pgtest.StartServer with
// logicaltest's settings: a spare port, a temporary directory) and returns
// it with the function that stops it (pg_ctl stop on its own data
// directory), also called on SIGINT or SIGTERM before the program exits.
func startLogical() (*logicalServer, func(), error) {
	srv, err := pgtest.StartServer(logicaltest.Settings...)
	if err != nil {
		return nil, nil, err
	}
	admin, err := sql.Open("pgx", srv.DSN)
	if err != nil {
		_ = srv.Stop("immediate")
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "private PostgreSQL (wal_level=logical) on :%d\n", srv.Port)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = admin.Close()
			if err := srv.Stop("fast"); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
			}
		})
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		stop()
		os.Exit(130)
	}()
	return &logicalServer{srv: srv, admin: admin}, stop, nil
}

// scratch creates a database and returns its DSN and the function that drops
// it with its replication slots (slots keep a database from being dropped).
func (l *logicalServer) scratch() (string, func(), error) {
	name := pgtest.Name("herald_bench_")
	if _, err := l.admin.Exec(`CREATE DATABASE ` + name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(l.srv.DSN)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		for range 50 {
			_, _ = l.admin.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
			_, err := l.admin.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
			var left int
			if err == nil {
				err = l.admin.QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&left)
			}
			if err == nil && left == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := l.admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`); err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop database:", err)
		}
	}, nil
}

// walBatchSize is walrelay's Config.BatchSize in the bench (-wal-batch).
var walBatchSize int

// runWAL measures the outbox in the WAL (outboxhook.StorageWAL + walrelay)
// beside the outbox table, on a private server at wal_level=logical, both
// modes in one run: the write path, the burn-down of a backlog written while
// no relay ran, and commit->publish latency.
func runWAL(fs *flag.FlagSet, args []string) error {
	parts := fs.String("parts", "write,burn,latency", "what to run: write, burn, latency (comma-separated)")
	writers := fs.Int("writers", 8, "write: concurrent writers")
	dur := fs.Duration("duration", 4*time.Second, "write: duration of one round of one scenario")
	rounds := fs.Int("rounds", 5, "write: rounds; scenarios alternate in a random order within a round")
	sizesFlag := fs.String("sizes", "100000,1000000", "burn: backlog sizes")
	burnRounds := fs.Int("burn-rounds", 3, "burn: rounds of the first size (scenarios in a random order within a round)")
	bigRounds := fs.Int("big-rounds", 1, "burn: rounds of the other sizes")
	pubs := fs.String("publishers", "gochannel,discard", "burn: publishers (see the relay bench)")
	rate := fs.Int("rate", 1000, "latency: events per second, all writers together")
	latDur := fs.Duration("latency-duration", 10*time.Second, "latency: how long to write")
	latRounds := fs.Int("latency-rounds", 3, "latency: rounds (both modes in a random order within a round)")
	status := fs.Duration("status-interval", 0, "walrelay Config.StatusInterval (0: its default)")
	fs.IntVar(&walBatchSize, "wal-batch", 0, "walrelay Config.BatchSize, events per publish call at most (0: its default; 1: one event per call)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	only := fs.String("only", "", "burn: run only the scenarios whose name contains this (walrelay, SQL reference, table, decoding)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProfile, err := startProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	l, stop, err := startLogical()
	if err != nil {
		return err
	}
	defer stop()
	var version string
	if err := l.admin.QueryRow(`SELECT current_setting('server_version')`).Scan(&version); err != nil {
		return err
	}
	fmt.Printf("Private PostgreSQL %s, wal_level=logical, fsync=off (pgtest.StartServer), %s\n\n", version, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	for _, p := range strings.Split(*parts, ",") {
		switch strings.TrimSpace(p) {
		case "write":
			err = walWrite(l, *writers, *dur, *rounds)
		case "burn":
			var sizes []int
			for _, f := range strings.Split(*sizesFlag, ",") {
				v, perr := strconv.Atoi(strings.TrimSpace(f))
				if perr != nil || v <= 0 {
					return fmt.Errorf("bad -sizes %q", *sizesFlag)
				}
				sizes = append(sizes, v)
			}
			err = walBurn(l, sizes, *burnRounds, *bigRounds, strings.Split(*pubs, ","), *status, *only)
		case "latency":
			err = walLatency(l, *rate, *latDur, *writers, *latRounds, *status)
		default:
			return fmt.Errorf("unknown part %q (write, burn, latency)", p)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// walWrite is the write bench of both modes: GORM without the plugin, with it
// in table mode and in WAL mode, and the raw-SQL pairs (INSERT alone, + the
// outbox INSERT, + pg_logical_emit_message).
func walWrite(l *logicalServer, writers int, dur time.Duration, rounds int) error {
	ctx := context.Background()
	var cleanups []func()
	defer func() {
		for _, c := range slices.Backward(cleanups) {
			c()
		}
	}()
	open := func(storage outboxhook.Storage, plugin bool) (*gorm.DB, error) {
		dsn, drop, err := l.scratch()
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, drop)
		db, err := pgtest.OpenPool(dsn)
		if err != nil {
			return nil, err
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(writers)
		sqlDB.SetMaxIdleConns(writers)
		cleanups = append(cleanups, func() { _ = sqlDB.Close() })
		if plugin {
			if err := db.Use(outboxhook.New(outboxhook.Config{Storage: storage})); err != nil {
				return nil, err
			}
		} else if _, err := migrations.Migrate(ctx, db); err != nil {
			return nil, err
		}
		return db, db.AutoMigrate(&benchOrder{})
	}
	gormPlain, err := open(outboxhook.StorageTable, false)
	if err != nil {
		return err
	}
	gormTable, err := open(outboxhook.StorageTable, true)
	if err != nil {
		return err
	}
	gormWAL, err := open(outboxhook.StorageWAL, true)
	if err != nil {
		return err
	}
	var raw [3]*sql.DB
	for i := range raw {
		g, err := open(outboxhook.StorageTable, false)
		if err != nil {
			return err
		}
		raw[i], _ = g.DB()
	}
	gormSave := func(db *gorm.DB) func(context.Context) error {
		return func(ctx context.Context) error {
			o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1500}
			o.Record(orderPlaced{OrderID: o.ID, Amount: 1500})
			return db.WithContext(ctx).Create(o).Error
		}
	}
	rawSave := func(db *sql.DB, extra func(ctx context.Context, tx *sql.Tx, id uuid.UUID) error) func(context.Context) error {
		return func(ctx context.Context) error {
			id := uuid.New()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, postgresBench.rawInsert, id.String(), "placed", 1500); err != nil {
				return err
			}
			if extra != nil {
				if err := extra(ctx, tx, id); err != nil {
					return err
				}
			}
			return tx.Commit()
		}
	}
	scenarios := []struct {
		name string
		op   func(context.Context) error
	}{
		{"GORM Create, no plugin", gormSave(gormPlain)},
		{"GORM Create + Herald, table mode", gormSave(gormTable)},
		{"GORM Create + Herald, WAL mode", gormSave(gormWAL)},
		{"raw SQL: INSERT", rawSave(raw[0], nil)},
		{"raw SQL: INSERT + outbox INSERT", rawSave(raw[1], func(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
			payload, err := json.Marshal(orderPlaced{OrderID: id, Amount: 1500})
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, postgresBench.rawOutboxInsert, postgresBench.rawOutboxArgs(id.String(), payload)...)
			return err
		})},
		{"raw SQL: INSERT + pg_logical_emit_message", rawSave(raw[2], func(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
			content, err := json.Marshal(map[string]any{
				"id": events.NewID(), "type": "order.placed", "aggregate_type": "Order", "aggregate_id": id.String(),
				"topic": "order.placed", "payload": orderPlaced{OrderID: id, Amount: 1500}, "occurred_at": time.Now(),
			})
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `SELECT pg_logical_emit_message(true, 'herald', $1::text)`, string(content))
			return err
		})},
	}
	for _, s := range scenarios {
		if _, err := load(ctx, writers, 500*time.Millisecond, s.op); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	res := make([][]result, len(scenarios))
	for round := range rounds {
		for _, i := range rand.Perm(len(scenarios)) {
			s := scenarios[i]
			r, err := load(ctx, writers, dur, s.op)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Fprintf(os.Stderr, "round %d %-42s %8.0f/s p50 %s p99 %s\n", round+1, s.name, r.perSec(), ms(r.p50), ms(r.p99))
			res[i] = append(res[i], r)
		}
	}
	fmt.Printf("### Write path, %d writers, %d rounds of %s per scenario (median round)\n\n", writers, rounds, dur)
	fmt.Println("| scenario | saves/s | p50 | p99 |")
	fmt.Println("|---|---:|---:|---:|")
	for i, s := range scenarios {
		m := median(res[i])
		fmt.Printf("| %s | %.0f | %s | %s |\n", s.name, m.perSec(), ms(m.p50), ms(m.p99))
	}
	// Per round: each mode's throughput against no plugin, WAL against table,
	// and the time each adds to a save (1/with - 1/without, in microseconds of
	// the writers' wall time per save).
	var tbl, wal, walVsTbl, rawTbl, rawWAL, addTbl, addWAL []float64
	for r := range rounds {
		p, t, w := res[0][r].perSec(), res[1][r].perSec(), res[2][r].perSec()
		tbl, wal, walVsTbl = append(tbl, t/p), append(wal, w/p), append(walVsTbl, w/t)
		addTbl, addWAL = append(addTbl, 1e6*(1/t-1/p)), append(addWAL, 1e6*(1/w-1/p))
		rawTbl = append(rawTbl, res[4][r].perSec()/res[3][r].perSec())
		rawWAL = append(rawWAL, res[5][r].perSec()/res[3][r].perSec())
	}
	fmt.Printf("\nthroughput with/without the plugin (median of per-round ratios): table mode %.3f, WAL mode %.3f; raw SQL: + outbox INSERT %.3f, + emit %.3f\n",
		medianF(tbl), medianF(wal), medianF(rawTbl), medianF(rawWAL))
	fmt.Printf("WAL mode / table mode: median %.1f%% (rounds: %s; goal: >= 100%%, WAL's write cost no higher than the table's INSERT)\n",
		100*medianF(walVsTbl), pcts(walVsTbl))
	fmt.Printf("time added per save (median, µs of wall time at %d writers): table mode %.1f, WAL mode %.1f\n\n", writers, medianF(addTbl), medianF(addWAL))
	return nil
}

// The burn-down scenarios of the WAL bench, by name.
const (
	walSQLRef   = "SQL reference (table: claim+delete+read, no publish)"
	walTableRun = "Herald relay, table mode, unordered"
	walRelayRun = "walrelay (WAL mode)"
	walDecode   = "WAL reference (server decoding only: pg_logical_slot_get_binary_changes, no publish)"
)

// walBurn burns down backlogs of each size, written while no relay ran: the
// table mode's SQL reference and relay, and walrelay on a slot created before
// the events were written.
func walBurn(l *logicalServer, sizes []int, firstRounds, otherRounds int, pubs []string, status time.Duration, only string) error {
	names := []string{walSQLRef, walTableRun, walRelayRun, walDecode}
	if only != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.Contains(n, only) })
	}
	// rates[size][publisher][scenario] over the rounds.
	rates := map[int]map[string]map[string][]float64{}
	var storage []string
	for si, size := range sizes {
		rounds := otherRounds
		if si == 0 {
			rounds = firstRounds
		}
		rates[size] = map[string]map[string][]float64{}
		for round := range rounds {
			for _, pk := range pubs {
				if rates[size][pk] == nil {
					rates[size][pk] = map[string][]float64{}
				}
				for _, i := range rand.Perm(len(names)) {
					rate, fig, err := walBurnOne(l, names[i], size, pk, status)
					if err != nil {
						return fmt.Errorf("%s, %d, %s: %w", names[i], size, pk, err)
					}
					fmt.Fprintf(os.Stderr, "burn %d round %d %s / %s: %.0f events/s; %s\n", size, round+1, pk, names[i], rate, fig)
					rates[size][pk][names[i]] = append(rates[size][pk][names[i]], rate)
					if round == 0 && pk == pubs[0] {
						storage = append(storage, fmt.Sprintf("| %d | %s | %s |", size, names[i], fig))
					}
				}
			}
		}
	}
	fmt.Println("### Burn-down of a backlog written while no relay ran, events/s (median of the rounds)")
	fmt.Println()
	fmt.Println("| backlog | rounds | publisher | SQL reference | table relay | walrelay | server decoding alone | walrelay / SQL reference | walrelay / table relay |")
	fmt.Println("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for si, size := range sizes {
		rounds := otherRounds
		if si == 0 {
			rounds = firstRounds
		}
		for _, pk := range pubs {
			r := rates[size][pk]
			ref, tbl, wal, dec := median0(r[walSQLRef]), median0(r[walTableRun]), median0(r[walRelayRun]), median0(r[walDecode])
			// The ratios round by round (the three ran side by side), median.
			var vsRef []float64
			for i := range min(len(r[walRelayRun]), len(r[walSQLRef])) {
				vsRef = append(vsRef, r[walRelayRun][i]/r[walSQLRef][i])
			}
			fmt.Printf("| %d | %d | %s | %.0f | %.0f | %.0f | %.0f | %.2fx (rounds: %s) | %.2fx |\n", size, rounds, pk, ref, tbl, wal, dec,
				median0(vsRef), xs(vsRef), wal/tbl)
		}
	}
	fmt.Println("\ngoal: walrelay >= 1.5x the SQL reference at every size")
	fmt.Println()
	fmt.Println("Storage after the burn-down (first round, first publisher): the outbox table, and the slot")
	fmt.Println()
	fmt.Println("| backlog | scenario | at the end |")
	fmt.Println("|---:|---|---|")
	for _, s := range storage {
		fmt.Println(s)
	}
	fmt.Println()
	return nil
}

// median0 is medianF, or 0 for no values (a scenario left out by -only).
func median0(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return medianF(v)
}

func xs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// walBurnOne runs one burn-down scenario in a database of its own and returns
// its rate and the storage figures at the end.
func walBurnOne(l *logicalServer, name string, n int, pk string, status time.Duration) (float64, string, error) {
	dsn, drop, err := l.scratch()
	if err != nil {
		return 0, "", err
	}
	defer drop()
	topic := brokertest.Topic("bench")
	pub, closePub, err := target(pk, topic)
	if err != nil {
		return 0, "", err
	}
	defer closePub()
	cp := &countingPublisher{Publisher: pub, want: int64(n), done: make(chan struct{})}
	db, err := pgtest.OpenPool(dsn)
	if err != nil {
		return 0, "", err
	}
	var took time.Duration
	switch name {
	case walSQLRef, walTableRun:
		if err := loadOutbox(db, n, topic); err != nil {
			closeGorm(db)
			return 0, "", err
		}
		if name == walSQLRef {
			sqlDB, _ := db.DB()
			deleted, t, err := claimAll(postgresBench.claimDelete, sqlDB, n)
			if err == nil {
				err = verifyDrained(n, deleted, db, 0)
			}
			if err != nil {
				closeGorm(db)
				return 0, "", err
			}
			took = t
		} else {
			r, err := relay.New(db, cp, relay.Config{Logger: discardLogger()})
			if err == nil {
				err = runUntil(r.Run, cp.done)
			}
			if err == nil {
				err = verifyDrained(n, cp.n.Load(), db, 0)
			}
			if err != nil {
				closeGorm(db)
				return 0, "", err
			}
			took = publishTook
		}
	case walRelayRun, walDecode:
		cfg := walrelay.Config{Slot: pgtest.Name("herald_s_"), StatusInterval: status, BatchSize: walBatchSize, Logger: discardLogger()}
		ctx := context.Background()
		if err := walrelay.Setup(ctx, dsn, cfg); err != nil { // the slot first: it keeps only what is written after it
			closeGorm(db)
			return 0, "", err
		}
		t0 := time.Now()
		if err := loadWAL(db, n, topic); err != nil {
			closeGorm(db)
			return 0, "", err
		}
		fmt.Fprintf(os.Stderr, "wrote %d events in the WAL in %.1f s\n", n, time.Since(t0).Seconds())
		if name == walDecode {
			// What the server's decoding costs alone: the slot read to its end
			// in one call, the rows counted, nothing published.
			var rows int
			start := time.Now()
			err := db.Raw(`SELECT count(*) FROM pg_logical_slot_get_binary_changes(?, NULL, NULL,
	'proto_version', '1', 'publication_names', 'herald', 'messages', 'true')`, cfg.Slot).Scan(&rows).Error
			took = time.Since(start)
			closeGorm(db)
			if err != nil {
				return 0, "", err
			}
			if rows < n {
				return 0, "", fmt.Errorf("decoded %d changes, fewer than %d events", rows, n)
			}
			time.Sleep(time.Second)
			return float64(n) / took.Seconds(), outboxStorage(dsn), nil
		}
		r, err := walrelay.New(dsn, cp, cfg)
		if err == nil {
			err = runUntil(r.Run, cp.done)
		}
		if err == nil {
			// No outbox rows in WAL mode: the count alone.
			err = verifyDrained(n, cp.n.Load(), nil, 0)
		}
		if err != nil {
			closeGorm(db)
			return 0, "", err
		}
		took = publishTook
	}
	closeGorm(db) // the sessions end, and flush their statistics
	time.Sleep(time.Second)
	return float64(n) / took.Seconds(), outboxStorage(dsn), nil
}

// loadWAL writes n events in the WAL through outboxhook in StorageWAL mode
// (outboxhook.AddMessages, transactions of 1000), over 1000 aggregates, with
// the same payloads as loadOutbox.
func loadWAL(db *gorm.DB, n int, topic string) error {
	if err := db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})); err != nil {
		return err
	}
	return addBacklog(db, n, topic)
}

// outboxStorage reads, on a new session, the outbox table's row versions and
// size (or its absence) and the database's slot's lag behind the WAL.
func outboxStorage(dsn string) string {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	var out []string
	var live, dead int64
	var size int64
	err = db.QueryRow(`SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE relname = 'outbox_messages'`).Scan(&live, &dead, &size)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		out = append(out, "no outbox table")
	case err != nil:
		out = append(out, err.Error())
	default:
		out = append(out, fmt.Sprintf("outbox_messages: %d live, %d dead tuples, %.1f MB", live, dead, float64(size)/1e6))
	}
	var slot string
	var lag sql.NullInt64
	err = db.QueryRow(`SELECT slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE database = current_database()`).Scan(&slot, &lag)
	if err == nil {
		out = append(out, fmt.Sprintf("slot confirmed %.1f MB behind the WAL's end", float64(lag.Int64)/1e6))
	}
	return strings.Join(out, "; ")
}

// walLatency measures commit->publish latency at rate events/s for both
// modes, the relay in the writer's process: the table relay woken by Wake
// (PollInterval 1s), and walrelay streaming its slot.
func walLatency(l *logicalServer, rate int, dur time.Duration, writers, rounds int, status time.Duration) error {
	modes := []string{"table mode (relay woken by Wake)", "WAL mode (walrelay)"}
	lats := make([][]time.Duration, len(modes))
	var notes [2][]string
	for round := range rounds {
		for _, i := range rand.Perm(len(modes)) {
			d, note, err := walLatencyOne(l, i == 1, rate, dur, writers, status)
			if err != nil {
				return fmt.Errorf("%s: %w", modes[i], err)
			}
			slices.Sort(d)
			fmt.Fprintf(os.Stderr, "latency round %d %s: p50 %s p90 %s p99 %s max %s; %s\n", round+1, modes[i],
				ms(pct(d, .5)), ms(pct(d, .9)), ms(pct(d, .99)), ms(d[len(d)-1]), note)
			lats[i] = append(lats[i], d...)
			notes[i] = append(notes[i], note)
		}
	}
	fmt.Printf("### Commit->publish latency at %d events/s, %d writers, %d rounds of %s per mode (all rounds' events together)\n\n", rate, writers, rounds, dur)
	fmt.Println("| mode | events | p50 | p90 | p99 | max | at the end of each round |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---|")
	for i, m := range modes {
		d := lats[i]
		slices.Sort(d)
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s |\n", m, len(d), ms(pct(d, .5)), ms(pct(d, .9)), ms(pct(d, .99)), ms(d[len(d)-1]), strings.Join(notes[i], " / "))
	}
	fmt.Println("\ngoal: WAL mode p99 <= 5 ms")
	fmt.Println()
	return nil
}

func walLatencyOne(l *logicalServer, wal bool, rate int, dur time.Duration, writers int, status time.Duration) ([]time.Duration, string, error) {
	dsn, drop, err := l.scratch()
	if err != nil {
		return nil, "", err
	}
	defer drop()
	db, err := pgtest.OpenPool(dsn)
	if err != nil {
		return nil, "", err
	}
	defer closeGorm(db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tp := newTimingPublisher()
	var relayWG sync.WaitGroup
	defer relayWG.Wait() // after cancel (deferred later, run first)
	defer cancel()
	if wal {
		cfg := walrelay.Config{Slot: pgtest.Name("herald_s_"), StatusInterval: status, BatchSize: walBatchSize, Logger: discardLogger()}
		if err := walrelay.Setup(ctx, dsn, cfg); err != nil {
			return nil, "", err
		}
		r, err := walrelay.New(dsn, tp, cfg)
		if err != nil {
			return nil, "", err
		}
		relayWG.Add(1)
		go func() { defer relayWG.Done(); _ = r.Run(ctx) }()
		if err := db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})); err != nil {
			return nil, "", err
		}
	} else {
		var wake func()
		if err := db.Use(outboxhook.New(outboxhook.Config{Notify: func() { wake() }})); err != nil {
			return nil, "", err
		}
		r, err := relay.New(db, tp, relay.Config{PollInterval: time.Second, Logger: discardLogger()})
		if err != nil {
			return nil, "", err
		}
		wake = r.Wake
		relayWG.Add(1)
		go func() { defer relayWG.Done(); _ = r.Run(ctx) }()
	}
	if err := db.AutoMigrate(&latOrder{}); err != nil {
		return nil, "", err
	}
	time.Sleep(time.Second) // the relay streaming, or polling

	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		wg        sync.WaitGroup
		werr      error
	)
	interval := time.Duration(float64(time.Second) * float64(writers) / float64(rate))
	deadline := time.Now().Add(dur)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(interval * time.Duration(w) / time.Duration(writers))
			t := time.NewTicker(interval)
			defer t.Stop()
			for time.Now().Before(deadline) {
				<-t.C
				o := &latOrder{ID: uuid.New()}
				o.Record(orderPlaced{OrderID: o.ID, Amount: 1})
				id := o.Records()[0].ID.String()
				if err := db.Create(o).Error; err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if werr != nil {
		return nil, "", werr
	}
	time.Sleep(2 * time.Second) // let the relay finish
	var out []time.Duration
	slow := map[int]int{} // events over 10 ms by the 250 ms of the round they committed in
	begin := deadline.Add(-dur)
	tp.mu.Lock()
	for id, c := range committed {
		p, ok := tp.at[id]
		if !ok {
			tp.mu.Unlock()
			return nil, "", fmt.Errorf("event %s never published", id)
		}
		out = append(out, max(p.Sub(c), 0))
		if p.Sub(c) > 10*time.Millisecond {
			slow[int(c.Sub(begin)/(250*time.Millisecond))]++
		}
	}
	tp.mu.Unlock()
	// Whether the slow events are spread or in bursts (a stall).
	var buckets []string
	for _, b := range slices.Sorted(maps.Keys(slow)) {
		buckets = append(buckets, fmt.Sprintf("%.2fs:%d", float64(b)/4, slow[b]))
	}
	fmt.Fprintf(os.Stderr, "wal=%v events over 10 ms by commit time in the round: %s\n", wal, strings.Join(buckets, " "))
	cancel()
	relayWG.Wait()
	closeGorm(db)
	time.Sleep(time.Second)
	return out, outboxStorage(dsn), nil
}
