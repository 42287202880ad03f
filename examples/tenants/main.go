// Command tenants relays the outboxes of many tenants with one fleet.Fleet:
// each tenant is an SQLite file of its own, opened by the fleet only while
// it has work, and a consumer handles each event once, in the database of the
// tenant it came from.
//
//	go run ./examples/tenants
//
// It needs no server: the files are in a temporary directory, removed at the
// end, and the broker is Watermill's GoChannel. Three tenants start; a fourth
// is added while the fleet runs. It prints each event handled, then the
// fleet's status of every tenant.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Invoice is a tenant's aggregate: Issue records the event its save writes.
type Invoice struct {
	ID     string `gorm:"primaryKey"`
	Amount int
	aggregate.Root
}

// InvoiceIssued is the event the tenants publish.
type InvoiceIssued struct {
	InvoiceID string `json:"invoice_id"`
	Amount    int    `json:"amount"`
}

func (InvoiceIssued) EventType() string { return "invoice.issued" }

// Issue bills amount and records InvoiceIssued.
func (i *Invoice) Issue(amount int) {
	i.Amount = amount
	i.Record(InvoiceIssued{InvoiceID: i.ID, Amount: amount})
}

// Receipt is the consumer's effect, written in the tenant's own database.
type Receipt struct {
	ID        uint `gorm:"primaryKey"`
	InvoiceID string
	Tenant    string // from the message's metadata (events.MetaTenant)
}

// open opens a tenant's SQLite file with the settings Herald requires: one
// write lock taken at BEGIN, waited for, readers beside the writer (WAL).
func open(path string) (*gorm.DB, error) {
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	return gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), &gorm.Config{Logger: logger.Discard})
}

// tenants is the application's list of tenants: their databases (with the
// outbox hook) and inboxes, and their definitions for the fleet.
type tenants struct {
	dir   string
	fleet *fleet.Fleet

	mu      sync.Mutex
	dbs     map[string]*gorm.DB
	inboxes map[string]*inbox.Inbox
	defs    []fleet.Tenant
}

// add creates tenant id's database and lists it: the fleet relays it from
// its next refresh on.
func (ts *tenants) add(id string) error {
	path := filepath.Join(ts.dir, id+".db")
	db, err := open(path)
	if err != nil {
		return err
	}
	// After each commit that wrote events, wake the fleet for this tenant.
	if err := db.Use(outboxhook.New(outboxhook.Config{Notify: func() { ts.fleet.Wake(id) }})); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Invoice{}, &Receipt{}); err != nil {
		return err
	}
	// The tenant's inbox (a real application also calls its Cleanup now and
	// then, to delete the ids older than its Retention).
	in, err := inbox.New(db, inbox.Config{RetryHorizon: relay.Config{}.RetryHorizon()})
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.dbs[id], ts.inboxes[id] = db, in
	// The fleet opens the file itself when the tenant has work, and closes it
	// once the tenant is idle.
	ts.defs = append(ts.defs, fleet.Tenant{ID: id, Open: func(context.Context) (*gorm.DB, error) { return open(path) }})
	return nil
}

// issue saves two invoices of tenant id, each with its event in one
// transaction; Notify then wakes the fleet for the tenant.
func (ts *tenants) issue(id string) error {
	ts.mu.Lock()
	db := ts.dbs[id]
	ts.mu.Unlock()
	for i := 1; i <= 2; i++ {
		inv := Invoice{ID: fmt.Sprintf("%s-%d", id, i)}
		inv.Issue(100 * i)
		if err := db.Create(&inv).Error; err != nil {
			return err
		}
	}
	return nil
}

// list is the fleet's Config.Tenants.
func (ts *tenants) list(context.Context) ([]fleet.Tenant, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]fleet.Tenant(nil), ts.defs...), nil
}

// inbox is a router middleware: each message goes through the inbox of its
// tenant's database, and its handler writes there (inbox.Tx).
func (ts *tenants) inbox(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		id := msg.Metadata.Get(events.MetaTenant)
		ts.mu.Lock()
		in := ts.inboxes[id]
		ts.mu.Unlock()
		if in == nil { // nacked, and redelivered: log and drop it in a real application
			return nil, fmt.Errorf("message %s: unknown tenant %q", msg.UUID, id)
		}
		return in.Middleware(h)(msg)
	}
}

// close closes the tenants' databases.
func (ts *tenants) close() {
	for _, db := range ts.dbs {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tenants:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "herald-tenants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory
	return runIn(ctx, out, dir)
}

// runIn runs the example with the tenants' files in dir.
func runIn(ctx context.Context, out io.Writer, dir string) error {
	ctx, cancel := context.WithCancel(ctx)
	printf := func(format string, a ...any) { _, _ = fmt.Fprintf(out, format, a...) }
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close() //nolint:errcheck // nothing to report
	ts := &tenants{dir: dir, dbs: map[string]*gorm.DB{}, inboxes: map[string]*inbox.Inbox{}}
	defer ts.close()
	var wg sync.WaitGroup // the router and the fleet: stopped before the databases close
	defer wg.Wait()
	defer cancel()
	f, err := fleet.New(pubSub, fleet.Config{
		Tenants:         ts.list,
		RefreshInterval: 200 * time.Millisecond,      // how soon a new tenant is seen
		Relay:           relay.Config{Ordered: true}, // each invoice's events in order
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	ts.fleet = f

	// The consumer: each event once per tenant, its receipt in the tenant's
	// database, in the transaction of the tenant's inbox.
	type handled struct{ tenant, invoice string }
	done := make(chan handled)
	var reg events.Registry
	reg.MustRegister(InvoiceIssued{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(ts.inbox)
	router.AddConsumerHandler("receipts", "invoice.issued", pubSub, func(msg *message.Message) error {
		e, _, err := inbox.Decode(&reg, msg)
		if err != nil {
			return err
		}
		h := handled{tenant: msg.Metadata.Get(events.MetaTenant), invoice: e.(InvoiceIssued).InvoiceID}
		if err := inbox.Tx(msg.Context()).Create(&Receipt{InvoiceID: h.invoice, Tenant: h.tenant}).Error; err != nil {
			return err
		}
		inbox.AfterCommit(msg.Context(), func() {
			select {
			case done <- h:
			case <-ctx.Done():
			}
		})
		return nil
	})
	var routerErr, fleetErr error
	wg.Go(func() { routerErr = router.Run(ctx) })
	<-router.Running()

	initial := []string{"acme", "globex", "initech"}
	for _, id := range initial {
		if err := ts.add(id); err != nil {
			return err
		}
	}
	wg.Go(func() { fleetErr = f.Run(ctx) })
	for _, id := range initial {
		if err := ts.issue(id); err != nil {
			return err
		}
	}
	// A fourth tenant, added while the fleet runs: listed at its next
	// refresh, and probed at once then.
	if err := ts.add("hooli"); err != nil {
		return err
	}
	if err := ts.issue("hooli"); err != nil {
		return err
	}
	printf("added tenant hooli while the fleet runs\n")

	for range 8 {
		select {
		case h := <-done:
			printf("%-8s handled invoice.issued of %s\n", h.tenant, h.invoice)
		case <-time.After(10 * time.Second):
			return errors.New("the events were not all handled within 10s")
		}
	}

	printf("\nTENANT   STATE    FAILURES  LAST WORK\n")
	for _, s := range f.Status() {
		last := "-" // none finished yet: LastWork is set when a run ends
		if !s.LastWork.IsZero() {
			last = time.Since(s.LastWork).Round(time.Millisecond).String() + " ago"
		}
		printf("%-8s %-8s %-9d %s\n", s.ID, s.State, s.Failures, last)
	}
	cancel()
	wg.Wait()
	return errors.Join(fleetErr, routerErr)
}
