package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// PostgreSQL unreachable when the relay starts, and again mid-run: Run keeps
// trying, never returns early, and relays everything once it is back.
func TestDatabaseDownAtStartAndMidRun(t *testing.T) {
	e := newEnv(t)
	proxy := pgtest.StartProxy(t, "127.0.0.1:5432")
	proxy.Down()
	rdb := pgtest.OpenDSN(t, pgtest.WithHost(e.dsn, proxy.Addr, ""), &gorm.Config{DisableAutomaticPing: true})
	gc := newGoChannel()
	got := consume(t, gc, "account.deposited")
	r, err := relay.New(rdb, gc, relay.Config{PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	returned, _ := e.run(r)
	e.write(10, 2)
	time.Sleep(500 * time.Millisecond)
	if got.distinct() != 0 || returned.Load() {
		t.Fatal("relayed without a database, or Run returned")
	}
	proxy.Up()
	eventually(t, 40*time.Second, "20 events after the database came back", func() bool { return got.distinct() == 20 })

	proxy.Down()
	e.write(10, 2)
	time.Sleep(500 * time.Millisecond)
	proxy.Up()
	eventually(t, 40*time.Second, "40 events after the second outage", func() bool { return got.distinct() == 40 })
	eventually(t, 10*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
	if returned.Load() {
		t.Fatal("Run returned during an outage")
	}
}

// pg_terminate_backend on every connection of the relay, repeatedly, while
// events flow: nothing is lost, the relay carries on.
func TestTerminateRelayBackends(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			app := pgtest.Name("relay_")
			rdb := pgtest.OpenDSN(t, pgtest.WithHost(e.dsn, "", app), nil)
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			r, err := relay.New(rdb, gc, relay.Config{Ordered: ordered, PollInterval: 50 * time.Millisecond,
				BatchSize: 10, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			returned, _ := e.run(r)
			ids := map[string]bool{}
			terminated := 0
			for range 8 {
				for k, v := range idSet(e.write(10, 3)) {
					ids[k] = v
				}
				time.Sleep(50 * time.Millisecond)
				terminated += pgtest.Terminate(t, app)
			}
			if terminated == 0 {
				t.Fatal("no relay backend was terminated")
			}
			eventually(t, 60*time.Second, "240 events", func() bool { return got.distinct() == 240 })
			for _, m := range got.snapshot() {
				if !ids[m.UUID] {
					t.Fatalf("unknown message %s", m.UUID)
				}
			}
			eventually(t, 10*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
			if returned.Load() {
				t.Fatal("Run returned")
			}
		})
	}
}

// Wake-ups carry the speed: with polling every minute, events still go out at
// once, woken in-process (Notify = Wake), across processes (LISTEN/NOTIFY via a
// Notifier), and from a transaction the caller opened (re-checks after a wake).
func TestWakeUps(t *testing.T) {
	for _, name := range []string{"in-process", "notify"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			channel := pgtest.Name("herald_")
			r, err := relay.New(e.db, gc, relay.Config{PollInterval: time.Minute, Channel: channel, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			notify := r.Wake
			if name == "notify" {
				// Another process: its own handle, and a Notifier on the relay's channel.
				n, err := relay.NewNotifier(pgtest.OpenDSN(t, e.dsn, nil), relay.NotifierConfig{Channel: channel})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go func() { _ = n.Run(ctx) }()
				notify = n.Notify
			}
			w := pgtest.OpenDSN(t, e.dsn, nil)
			if err := w.Use(outboxhook.New(outboxhook.Config{Notify: notify})); err != nil {
				t.Fatal(err)
			}
			e.run(r)
			time.Sleep(300 * time.Millisecond) // the relay's first look (and LISTEN) is done
			for i := range 5 {
				start := time.Now()
				a := &Account{ID: uuid.New()}
				a.Record(Deposited{AccountID: a.ID})
				if err := w.Create(a).Error; err != nil {
					t.Fatal(err)
				}
				eventually(t, 5*time.Second, "the event, woken", func() bool { return got.distinct() == i+1 })
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("took %v: not woken", d)
				}
			}
			// A transaction the caller opened: the wake comes at write time, before
			// the commit; the relay re-checks until it shows.
			a := &Account{ID: uuid.New()}
			a.Record(Deposited{AccountID: a.ID})
			start := time.Now()
			err = w.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(a).Error; err != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the event of a caller's transaction", func() bool { return got.distinct() == 6 })
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v: not woken", d)
			}
		})
	}
}
