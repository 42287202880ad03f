package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/brokertest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// ledger is what the writers know: every event of a committed transaction, and
// every event of a rolled-back one.
type ledger struct {
	mu         sync.Mutex
	committed  map[string]struct{}
	rolledBack map[string]struct{}
}

// child is a relay or consumer process, restarted by its supervisor when it dies.
type child struct {
	role, id string
	mu       sync.Mutex
	cmd      *exec.Cmd
}

func (c *child) kill() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	return c.cmd.Process.Signal(syscall.SIGKILL) == nil
}

func orchestrate(args []string) (bool, error) {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	dur := fs.Duration("duration", 90*time.Second, "how long writers write and faults fly")
	killEvery := fs.Duration("kill-every", 2*time.Second, "SIGKILL a random relay or consumer this often")
	outages := fs.Int("outages", 2, "broker outages (each at least -outage)")
	outageLen := fs.Duration("outage", 10*time.Second, "length of one broker outage")
	writers := fs.Int("writers", 8, "writer goroutines")
	accounts := fs.Int("accounts", 400, "aggregates")
	crashOneIn := fs.Int("crash-one-in", 400, "a relay kills itself after one successful Publish call in this many")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	ctx := context.Background()

	// A private broker and a schema of our own: nothing shared is touched.
	natsDir, err := os.MkdirTemp("", "herald-chaos-nats-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(natsDir)
	srv, err := brokertest.NewNATSServer(natsDir)
	if err != nil {
		return false, err
	}
	if err := srv.Start(); err != nil {
		return false, err
	}
	defer srv.Stop()
	admin, err := sql.Open("pgx", pgtest.DSN())
	if err != nil {
		return false, err
	}
	defer admin.Close()
	schema := pgtest.Name("herald_chaos_")
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		return false, fmt.Errorf("cannot reach PostgreSQL at %s: %w", pgtest.DSN(), err)
	}
	defer admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) //nolint:errcheck
	e := env{dsn: pgtest.WithSearchPath(pgtest.DSN(), schema), nats: srv.URL(), topic: "chaos_events"}

	db, err := openDB(e.dsn, "chaos_writer")
	if err != nil {
		return false, err
	}
	topic := func(*events.Envelope) string { return e.topic }
	notifier, err := relay.NewNotifier(db, relay.NotifierConfig{Channel: "chaos"})
	if err != nil {
		return false, err
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Topic: topic, Notify: notifier.Notify})); err != nil {
		return false, err
	}
	if err := db.AutoMigrate(&Account{}, &Effect{}); err != nil {
		return false, err
	}
	relayDDL, err := relay.SchemaSQL("outbox_messages")
	if err != nil {
		return false, err
	}
	if err := db.Exec(relayDDL).Error; err != nil {
		return false, err
	}
	if _, err := inbox.New(db, inbox.Config{}); err != nil {
		return false, err
	}
	accs := make([]*Account, *accounts)
	for i := range accs {
		accs[i] = &Account{ID: uuid.New()}
		if err := db.Create(accs[i]).Error; err != nil {
			return false, err
		}
	}

	// The observer reads the stream in order, as the broker stored it.
	obs := &observer{seen: map[string]int{}}
	ocfg := brokertest.NATSSubscriberConfig(e.nats, "chaos_observer")
	ocfg.JetStream.AckAsync = true // one subscriber, in stream order; do not wait on each ack
	obsSub, err := wmnats.NewSubscriber(ocfg, watermill.NopLogger{})
	if err != nil {
		return false, err
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	msgs, err := obsSub.Subscribe(runCtx, e.topic)
	if err != nil {
		return false, err
	}
	go obs.run(msgs)
	go func() { _ = notifier.Run(runCtx) }()

	// Children, each restarted by its supervisor.
	var (
		children []*child
		restarts atomic.Int64
		wg       sync.WaitGroup
		stopping atomic.Bool
	)
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	for _, c := range []*child{{role: "relay", id: "1"}, {role: "relay", id: "2"}, {role: "relay", id: "3"},
		{role: "consumer", id: "1"}, {role: "consumer", id: "2"}} {
		children = append(children, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := true; !stopping.Load(); first = false {
				if !first {
					restarts.Add(1)
					time.Sleep(200 * time.Millisecond)
				}
				cmd := exec.Command(self, c.role)
				ce := e
				ce.id = c.id
				cmd.Env = append(os.Environ(), append(ce.vars(), fmt.Sprintf("CHAOS_CRASH_ONE_IN=%d", *crashOneIn))...)
				cmd.Stderr = os.Stderr
				c.mu.Lock()
				if stopping.Load() || cmd.Start() != nil {
					c.mu.Unlock()
					return
				}
				c.cmd = cmd
				c.mu.Unlock()
				_ = cmd.Wait()
			}
		}()
	}
	defer func() {
		stopping.Store(true)
		for _, c := range children {
			c.mu.Lock()
			if c.cmd != nil && c.cmd.Process != nil {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			c.mu.Unlock()
		}
		wg.Wait()
	}()

	// Writers.
	led := &ledger{committed: map[string]struct{}{}, rolledBack: map[string]struct{}{}}
	writeCtx, stopWriting := context.WithTimeout(ctx, *dur)
	defer stopWriting()
	var writeErrs atomic.Int64
	var ww sync.WaitGroup
	for w := range *writers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			mine := accs[w*len(accs)/(*writers) : (w+1)*len(accs)/(*writers)]
			for writeCtx.Err() == nil {
				i := rand.IntN(len(mine))
				a := mine[i]
				a.Version++
				a.Record(Deposited{AccountID: a.ID, Version: a.Version})
				// Only the event recorded now: earlier ones may still be pending
				// on the aggregate (committed in a transaction the hook did not
				// see end; the next save settles them).
				pending := a.Records()
				ids := []string{pending[len(pending)-1].ID.String()}
				rollback := rand.IntN(10) == 0
				err := db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Save(a).Error; err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				led.mu.Lock()
				switch {
				case err == nil:
					for _, id := range ids {
						led.committed[id] = struct{}{}
					}
				case errors.Is(err, errRollback):
					for _, id := range ids {
						led.rolledBack[id] = struct{}{}
					}
				default:
					writeErrs.Add(1)
				}
				led.mu.Unlock()
				if err != nil {
					// Forget the in-memory aggregate: reload what committed.
					fresh := &Account{}
					if db.First(fresh, "id = ?", a.ID).Error == nil {
						mine[i] = fresh
					}
				}
			}
		}()
	}

	// Faults.
	var kills, outagesDone, terminated atomic.Int64
	start := time.Now()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		nextOutage := 0
		terminatedOnce := false
		lastKill := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-writeCtx.Done():
				return
			case <-tick.C:
			}
			elapsed := time.Since(start)
			if time.Since(lastKill) >= *killEvery {
				lastKill = time.Now()
				if c := children[rand.IntN(len(children))]; c.kill() {
					kills.Add(1)
				}
			}
			if !terminatedOnce && elapsed > *dur*2/5 {
				terminatedOnce = true
				var n int64
				_ = admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE application_name LIKE 'chaos_relay_%' OR application_name LIKE 'chaos_consumer_%'`).Scan(&n)
				terminated.Store(n)
			}
			if nextOutage < *outages && elapsed > *dur*time.Duration(nextOutage+1)/time.Duration(*outages+2) &&
				elapsed+*outageLen < *dur {
				nextOutage++
				srv.Stop()
				fmt.Fprintf(os.Stderr, "chaos: broker down for %v\n", *outageLen)
				time.Sleep(*outageLen)
				if err := srv.Start(); err != nil {
					fmt.Fprintln(os.Stderr, "chaos: broker restart:", err)
				}
				outagesDone.Add(1)
			}
		}
	}()
	progressDone := make(chan struct{})
	go func() { // progress, every 5s, to stderr
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
			}
			var pending, applied int64
			_ = admin.QueryRow(`SELECT count(*) FROM ` + schema + `.outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&pending)
			_ = admin.QueryRow(`SELECT count(DISTINCT event_id) FROM ` + schema + `.effects`).Scan(&applied)
			led.mu.Lock()
			c := len(led.committed)
			led.mu.Unlock()
			obs.mu.Lock()
			seen := len(obs.order)
			obs.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: %4.0fs committed %d, outbox pending %d, in the stream %d, applied %d, kills %d\n",
				time.Since(start).Seconds(), c, pending, seen, applied, kills.Load())
		}
	}()
	defer close(progressDone)
	ww.Wait()
	<-faultsDone
	faultsStopped := time.Now()

	// Drain: everything committed published and applied, within 30s.
	led.mu.Lock()
	committed := len(led.committed)
	led.mu.Unlock()
	drained := false
	for time.Since(faultsStopped) < 30*time.Second {
		var pending, applied int64
		_ = admin.QueryRow(`SELECT count(*) FROM ` + schema + `.outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&pending)
		_ = admin.QueryRow(`SELECT count(DISTINCT event_id) FROM ` + schema + `.effects`).Scan(&applied)
		if pending == 0 && applied >= int64(committed) {
			drained = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	drainTime := time.Since(faultsStopped)
	time.Sleep(time.Second) // late redeliveries
	// The observer reads the stream one message at a time: let it finish.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		obs.mu.Lock()
		n := len(obs.order)
		obs.mu.Unlock()
		if n >= committed {
			break
		}
	}

	// The ledger.
	effects := map[string]int{}
	rows, err := admin.Query(`SELECT event_id, count(*) FROM ` + schema + `.effects GROUP BY event_id`)
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return false, err
		}
		effects[id] = n
	}
	rows.Close()
	var lost, dupEffects, ghosts int
	for id := range led.committed {
		switch n := effects[id]; {
		case n == 0:
			lost++
		case n > 1:
			dupEffects++
		}
	}
	for id := range led.rolledBack {
		if effects[id] > 0 || obs.sawID(id) {
			ghosts++
		}
	}
	violations, dupDeliveries := obs.verdict()
	var dead int64
	_ = admin.QueryRow(`SELECT count(*) FROM ` + schema + `.outbox_messages WHERE dead_at IS NOT NULL`).Scan(&dead)

	ok := lost == 0 && dupEffects == 0 && ghosts == 0 && violations == 0 && drained && dead == 0
	fmt.Printf("\nHerald chaos run: %v of faults, 3 ordered relays, 2 consumers behind the inbox, NATS JetStream\n\n", *dur)
	fmt.Println("| measure | value |")
	fmt.Println("|---|---:|")
	row := func(k string, v any) { fmt.Printf("| %s | %v |\n", k, v) }
	row("events committed", committed)
	row("events rolled back (must never be seen)", len(led.rolledBack))
	row("writer errors (outcome unknown, not counted)", writeErrs.Load())
	row("kills (SIGKILL by the orchestrator)", kills.Load())
	row("process restarts (kills, crashes between ack and mark)", restarts.Load())
	row("broker outages", fmt.Sprintf("%d × %v", outagesDone.Load(), *outageLen))
	row("PostgreSQL backends terminated", terminated.Load())
	row("duplicate deliveries in the stream (allowed)", dupDeliveries)
	row("duplicate effects", dupEffects)
	row("lost", lost)
	row("ghost events (rolled back, yet seen)", ghosts)
	row("order violations", violations)
	row("dead events", dead)
	row("drain time after faults stopped", fmt.Sprintf("%.1fs (limit 30s, drained: %v)", drainTime.Seconds(), drained))
	if ok {
		fmt.Println("\nPASS: every committed event's effect happened exactly once, in order, and nothing else was seen.")
		fmt.Println("chaos: 1 passed, 0 failed")
	} else {
		fmt.Println("\nFAIL: see the table.")
		fmt.Println("chaos: 0 passed, 1 failed")
	}
	return ok, nil
}

var errRollback = errors.New("chaos: deliberate rollback")

// observer reads the whole stream in order and keeps, per event, its first
// position, to check per-aggregate order and count duplicate deliveries.
type observer struct {
	mu    sync.Mutex
	seen  map[string]int // event id -> first position
	order []observed
	dups  int
}

type observed struct {
	id      string
	account string
	version int
}

func (o *observer) run(msgs <-chan *message.Message) {
	for m := range msgs {
		var d Deposited
		_ = json.Unmarshal(m.Payload, &d)
		o.mu.Lock()
		if _, ok := o.seen[m.UUID]; ok {
			o.dups++
		} else {
			o.seen[m.UUID] = len(o.order)
			o.order = append(o.order, observed{id: m.UUID, account: d.AccountID.String(), version: d.Version})
		}
		o.mu.Unlock()
		m.Ack()
	}
}

func (o *observer) sawID(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.seen[id]
	return ok
}

// verdict returns the order violations (an account's version first seen after
// a higher one of the same account) and the duplicate deliveries.
func (o *observer) verdict() (violations, dups int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	last := map[string]int{}
	for _, ob := range o.order {
		if v, ok := last[ob.account]; ok && ob.version < v {
			violations++
		}
		last[ob.account] = max(last[ob.account], ob.version)
	}
	return violations, o.dups
}
