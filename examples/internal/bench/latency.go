package main

import (
	"bufio"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// latencyBroker is the -publisher of the latency bench.
var latencyBroker string

// timingPublisher records when each message was published: when its Publish
// returned, or with a broker (inner), when the broker acknowledged it.
type timingPublisher struct {
	inner message.Publisher // nil: no broker, every message published at once
	mu    sync.Mutex
	at    map[string]time.Time
}

func newTimingPublisher() *timingPublisher { return &timingPublisher{at: map[string]time.Time{}} }

// latencyPublisher returns the latency bench's publisher: no broker (""), or
// a timing wrapper of Herald's JetStream publisher ("natsjs") that keeps its
// per-message results, and the timing publisher whose times it records.
func latencyPublisher(kind string) (message.Publisher, *timingPublisher, error) {
	tp := newTimingPublisher()
	switch kind {
	case "":
		return tp, tp, nil
	case "natsjs":
		js, err := natsjs.New(natsjs.Config{URL: brokertest.NATSURL(), AutoProvision: true, Logger: discardLogger()})
		if err != nil {
			return nil, nil, err
		}
		tp.inner = js
		return timingBatchPublisher{tp, js}, tp, nil
	}
	return nil, nil, fmt.Errorf("unknown -publisher %q (natsjs, or none)", kind)
}

func (p *timingPublisher) record(msgs []*message.Message, errs []error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range msgs {
		if _, ok := p.at[m.UUID]; !ok && (errs == nil || errs[i] == nil) {
			p.at[m.UUID] = now
		}
	}
}

func (p *timingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.inner != nil {
		if err := p.inner.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	p.record(msgs, nil)
	return nil
}

func (p *timingPublisher) Close() error {
	if p.inner != nil {
		return p.inner.Close()
	}
	return nil
}

// timingBatchPublisher is a timingPublisher of a publisher with a result per
// message (relay.BatchPublisher): each message's time is its own ack's call.
type timingBatchPublisher struct {
	*timingPublisher
	batch relay.BatchPublisher
}

func (p timingBatchPublisher) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	errs := p.batch.PublishBatch(ctx, topic, msgs...)
	if len(errs) == len(msgs) {
		p.record(msgs, errs)
	}
	return errs
}

type latOrder struct {
	ID uuid.UUID `gorm:"type:uuid;primaryKey"`
	aggregate.Root
}

func (latOrder) TableName() string { return "orders" }

// runLatency measures commit->publish latency at a steady rate, with the relay
// in the writer's process (woken by Wake) and in another process (woken by
// LISTEN/NOTIFY through a Notifier), the poll fallback left at 1s; with -hold,
// each also while another session holds a transaction id open from before the
// scenario starts until after it ends (BEGIN; SELECT pg_current_xact_id();
// SELECT pg_sleep(...)), so that vacuum can remove none of the rows the relay
// deletes meanwhile.
func runLatency(fs *flag.FlagSet, args []string) error {
	rate := fs.Int("rate", 1000, "events per second, all writers together")
	dur := fs.Duration("duration", 10*time.Second, "how long to write")
	writers := fs.Int("writers", 8, "writer goroutines")
	hold := fs.Bool("hold", false, "also run each placement while another session holds a transaction id open")
	only := fs.String("only", "", "run only the placements whose name contains this (writer's, another)")
	publisher := fs.String("publisher", "", "the broker: none (the relay's Publish returning is the publish), or natsjs (Herald's JetStream publisher: the broker's ack)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	admin, err := sql.Open("pgx", pgtest.DSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	latencyBroker = *publisher
	fmt.Printf("Commit->publish latency at %d events/s for %s, %d writers, PollInterval 1s, publisher %q\n\n", *rate, *dur, *writers, *publisher)
	fmt.Println("| relay | condition | events | p50 | p90 | p99 | max | writes p50 / p99 | outbox at the end |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---|")
	conditions := []bool{false}
	if *hold {
		conditions = append(conditions, true)
	}
	for _, where := range []string{"in the writer's process", "in another process"} {
		if *only != "" && !strings.Contains(where, *only) {
			continue
		}
		for _, held := range conditions {
			dsn, drop, err := scratchSchema(admin)
			if err != nil {
				return err
			}
			res, err := latencyRun(dsn, where == "in another process", held, *rate, *dur, *writers)
			drop()
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			lats := res.lats
			slices.Sort(lats)
			cond := "quiet"
			if held {
				cond = "transaction id held open"
			}
			fmt.Printf("| %s | %s | %d | %s | %s | %s | %s | %s / %s | %s |\n", where, cond, len(lats), ms(pct(lats, .5)), ms(pct(lats, .9)),
				ms(pct(lats, .99)), ms(lats[len(lats)-1]), ms(res.createP50), ms(res.createP99), res.stats)
		}
	}
	return nil
}

// latencyResult is one latency scenario's measurement.
type latencyResult struct {
	lats                 []time.Duration
	createP50, createP99 time.Duration
	stats                string // the outbox's storage figures at the end
}

// holdXact opens a transaction on its own connection, takes a transaction id
// and sleeps in it until the returned function is called (which ends it).
func holdXact(dsn string) (func(), error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := db.Conn(ctx)
	if err != nil {
		cancel()
		_ = db.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		cancel()
		_ = db.Close()
		return nil, err
	}
	var xid string
	if err := conn.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		cancel()
		_ = db.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = conn.ExecContext(ctx, `SELECT pg_sleep(86400)`) // until cancelled
	}()
	fmt.Fprintf(os.Stderr, "holding transaction %s open\n", xid)
	return func() {
		cancel()
		<-done
		_ = conn.Close() // the cancelled session is dropped with its transaction
		_ = db.Close()
	}, nil
}

func latencyRun(dsn string, otherProcess, held bool, rate int, dur time.Duration, writers int) (latencyResult, error) {
	var res latencyResult
	db, err := pgtest.OpenPool(dsn)
	if err != nil {
		return res, err
	}
	defer closeGorm(db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubFor, pub, err := latencyPublisher(latencyBroker)
	if err != nil {
		return res, err
	}
	defer func() { _ = pub.Close() }()
	var (
		notify   func()
		relayWG  sync.WaitGroup
		child    *exec.Cmd
		childOut *bufio.Scanner
	)
	channel := pgtest.Name("herald_lat_")
	if otherProcess {
		n, err := relay.NewNotifier(db, relay.NotifierConfig{Channel: channel})
		if err != nil {
			return res, err
		}
		relayWG.Add(1)
		go func() { defer relayWG.Done(); _ = n.Run(ctx) }()
		notify = n.Notify
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Notify: func() { notify() }})); err != nil {
		return res, err
	}
	if err := db.AutoMigrate(&latOrder{}); err != nil {
		return res, err
	}
	if otherProcess {
		child = exec.Command(os.Args[0], "latency-child")
		child.Env = append(os.Environ(), "HERALD_BENCH_DSN="+dsn, "HERALD_BENCH_CHANNEL="+channel, "HERALD_BENCH_PUBLISHER="+latencyBroker)
		child.Stderr = os.Stderr
		out, err := child.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := child.Start(); err != nil {
			return res, err
		}
		childOut = bufio.NewScanner(out)
		if !childOut.Scan() || childOut.Text() != "ready" {
			return res, fmt.Errorf("relay process did not start")
		}
	} else {
		r, err := relay.New(db, pubFor, relay.Config{PollInterval: time.Second, Channel: channel, Logger: discardLogger()})
		if err != nil {
			return res, err
		}
		notify = r.Wake
		relayWG.Add(1)
		go func() { defer relayWG.Done(); _ = r.Run(ctx) }()
	}
	time.Sleep(500 * time.Millisecond) // relay started, LISTEN in place
	if held {
		release, err := holdXact(dsn)
		if err != nil {
			return res, err
		}
		defer release() // at return: after the relay stopped and the figures were read
	}

	// Writers: each saves at rate/writers per second; the commit time is taken
	// when Create returns.
	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		createLat []time.Duration
		wg        sync.WaitGroup
		werr      error
	)
	interval := time.Duration(float64(time.Second) * float64(writers) / float64(rate))
	deadline := time.Now().Add(dur)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(interval * time.Duration(w) / time.Duration(writers)) // spread the writers' phases
			t := time.NewTicker(interval)
			defer t.Stop()
			for time.Now().Before(deadline) {
				<-t.C
				o := &latOrder{ID: uuid.New()}
				o.Record(orderPlaced{OrderID: o.ID, Amount: 1})
				id := o.Records()[0].ID.String()
				t0 := time.Now()
				if err := db.Create(o).Error; err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
				now := time.Now()
				mu.Lock()
				createLat = append(createLat, now.Sub(t0))
				committed[id] = now
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if werr != nil {
		return res, werr
	}
	slices.Sort(createLat)
	res.createP50, res.createP99 = pct(createLat, .5), pct(createLat, .99)
	fmt.Fprintf(os.Stderr, "writes: %d, Create p50 %s p99 %s\n", len(createLat), ms(res.createP50), ms(res.createP99))
	time.Sleep(2 * time.Second) // let the relay finish
	published := pub.at
	if otherProcess {
		_ = child.Process.Signal(syscall.SIGTERM)
		published = map[string]time.Time{}
		for childOut.Scan() {
			id, ns, ok := strings.Cut(childOut.Text(), " ")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(ns, 10, 64)
			published[id] = time.Unix(0, n)
		}
		_ = child.Wait()
	}
	cancel()
	relayWG.Wait()
	for id, c := range committed {
		p, ok := published[id]
		if !ok {
			return res, fmt.Errorf("event %s never published", id)
		}
		res.lats = append(res.lats, max(p.Sub(c), 0))
	}
	res.stats = outboxFigures(db)
	return res, nil
}

// outboxFigures reads the relay's storage figures of the outbox (dead row
// versions, size, the oldest transaction holding back vacuum).
func outboxFigures(db *gorm.DB) string {
	r, err := relay.New(db, newTimingPublisher(), relay.Config{Logger: discardLogger()})
	if err != nil {
		return err.Error()
	}
	s, err := r.Stats(context.Background())
	if err != nil {
		return err.Error()
	}
	xact := "unknown"
	if s.OldestTransactionKnown {
		xact = fmt.Sprintf("%.0f s", s.OldestTransactionAge.Seconds())
	}
	return fmt.Sprintf("%d dead tuples, %.1f MB, oldest xact %s", s.DeadTuples, float64(s.TableBytes)/1e6, xact)
}

// runLatencyChild is the relay process of the latency bench: it relays to a
// timing publisher until SIGTERM, then prints "id unixnano" per message.
func runLatencyChild() error {
	db, err := pgtest.OpenPool(os.Getenv("HERALD_BENCH_DSN"))
	if err != nil {
		return err
	}
	pubFor, pub, err := latencyPublisher(os.Getenv("HERALD_BENCH_PUBLISHER"))
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	r, err := relay.New(db, pubFor, relay.Config{PollInterval: time.Second, Channel: os.Getenv("HERALD_BENCH_CHANNEL"), Logger: discardLogger()})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("ready")
	_ = r.Run(ctx)
	w := bufio.NewWriter(os.Stdout)
	pub.mu.Lock()
	for id, at := range pub.at {
		_, _ = fmt.Fprintf(w, "%s %d\n", id, at.UnixNano()) // the parent reads until EOF; a short write shows as missing ids
	}
	pub.mu.Unlock()
	return w.Flush()
}
