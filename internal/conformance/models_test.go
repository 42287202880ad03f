package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Test models: an order aggregate with line aggregates as children, and a
// soft-deletable document with an auto-increment id.

type Order struct {
	ID     uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Status string
	Lines  []Line `gorm:"foreignKey:OrderID"`
	aggregate.Root
}

func NewOrder() *Order {
	o := &Order{ID: uuid.New(), Status: "new"}
	o.Record(OrderPlaced{OrderID: o.ID})
	return o
}

func (o *Order) Pay(amount int) {
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID, Amount: amount})
}

type Line struct {
	ID      uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	OrderID uuid.UUID `gorm:"type:varchar(36)"`
	SKU     string
	Shipped bool
	aggregate.Root
}

func (l *Line) Ship() {
	l.Shipped = true
	l.Record(LineShipped{LineID: l.ID})
}

type Doc struct {
	ID        uint `gorm:"primaryKey"`
	Title     string
	DeletedAt gorm.DeletedAt
	aggregate.Root
}

type OrderPlaced struct{ OrderID uuid.UUID }

func (OrderPlaced) EventType() string { return "order.placed" }

type OrderPaid struct {
	OrderID uuid.UUID
	Amount  int
}

func (OrderPaid) EventType() string { return "order.paid" }

type LineShipped struct{ LineID uuid.UUID }

func (LineShipped) EventType() string { return "line.shipped" }

type DocEvent struct{ Note string }

func (DocEvent) EventType() string { return "doc.changed" }

// Bad events.
type WithChan struct{ C chan int }

func (WithChan) EventType() string { return "bad.chan" }

type WithFloat struct{ F float64 }

func (WithFloat) EventType() string { return "bad.float" }

type NoType struct{}

func (NoType) EventType() string { return "" }

type Big struct{ Data string }

func (Big) EventType() string { return "big" }

var nan = math.NaN()

// setup opens a database of the test's own with the plugin and the test tables.
func setup(t *testing.T, d testkit.Dialect, cfg outboxhook.Config, gcfg *gorm.Config) *gorm.DB {
	t.Helper()
	db := d.OpenNew(t, gcfg)
	if err := db.Use(outboxhook.New(cfg)); err != nil {
		t.Fatalf("use plugin: %v", err)
	}
	if err := db.AutoMigrate(&Order{}, &Line{}, &Doc{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

type row = testkit.Row

// outbox returns the outbox rows in insertion order.
func outbox(t *testing.T, db *gorm.DB) []row {
	t.Helper()
	return testkit.Outbox(t, db)
}

func types(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Type
	}
	return out
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Session(&gorm.Session{NewDB: true}).Table(table).Unscoped().Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantTypes(t *testing.T, db *gorm.DB, want ...string) []row {
	t.Helper()
	rows := outbox(t, db)
	got := types(rows)
	if len(got) != len(want) {
		t.Fatalf("outbox types = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outbox types = %v, want %v", got, want)
		}
	}
	return rows
}

func wantNoPending(t *testing.T, aggs ...aggregate.Aggregate) {
	t.Helper()
	for _, a := range aggs {
		if n := len(a.AggregateRoot().Records()); n != 0 {
			t.Fatalf("%T still holds %d pending events after commit", a, n)
		}
	}
}

func wantPending(t *testing.T, a aggregate.Aggregate, n int) {
	t.Helper()
	if got := len(a.AggregateRoot().Records()); got != n {
		t.Fatalf("%T holds %d pending events, want %d", a, got, n)
	}
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal([]byte(s), &m))
	return m
}

// Effect is what an inbox test's handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
}

// inboxEnv is one inbox test's world: a database with the outbox plugin and
// the effects table.
type inboxEnv struct {
	t  *testing.T
	db *gorm.DB
}

func newInboxEnv(t *testing.T, dl testkit.Dialect) *inboxEnv {
	t.Helper()
	db := dl.OpenNew(t, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	must(t, db.AutoMigrate(&Effect{}))
	return &inboxEnv{t: t, db: db}
}

func (e *inboxEnv) inbox(cfg inbox.Config) *inbox.Inbox {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	in, err := inbox.New(e.db, cfg)
	must(e.t, err)
	return in
}

// effects counts effect rows per message id.
func (e *inboxEnv) effects() map[string]int {
	e.t.Helper()
	var rows []Effect
	must(e.t, e.db.Session(&gorm.Session{NewDB: true}).Find(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.MessageID]++
	}
	return out
}

func (e *inboxEnv) count(table string) int64 {
	e.t.Helper()
	return testkit.Count(e.t, e.db, table)
}

// recordEffect is a handler that writes one Effect in the inbox's transaction
// and counts its calls.
func recordEffect(calls *atomic.Int64) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		calls.Add(1)
		tx := inbox.Tx(msg.Context())
		return tx.Create(&Effect{Consumer: message.HandlerNameFromCtx(msg.Context()), MessageID: msg.UUID}).Error
	}
}

func noPublish(h message.NoPublishHandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
}

func quiet() *slog.Logger { return testkit.Quiet() }

// The relay's world: accounts whose deposits are the events, in a database of
// the test's own that relays (and writers) open as other processes would.

// Account and Deposited are the tests' aggregate and event (testkit's).
type (
	Account   = testkit.Account
	Deposited = testkit.Deposited
)

// Withdrawn is a second event type; with the default topic (the event type)
// it goes to a topic of its own.
type Withdrawn struct{ AccountID uuid.UUID }

func (Withdrawn) EventType() string { return "account.withdrawn" }

const (
	depositedTopic = "account.deposited"
	withdrawnTopic = "account.withdrawn"
)

// depositSeq is the Seq of a Deposited payload (-1 if it is none).
func depositSeq(payload []byte) int {
	var d Deposited
	if json.Unmarshal(payload, &d) != nil || d.AccountID == uuid.Nil {
		return -1
	}
	return d.Seq
}

// seqIs picks the Deposited messages of sequence n.
func seqIs(n int) func(*message.Message) bool {
	return func(m *message.Message) bool { return depositSeq(m.Payload) == n }
}

// relayEnv is one relay test's world: a database with the outbox and the
// accounts, db its writers' handle.
type relayEnv struct {
	t     *testing.T
	d     testkit.Dialect
	dsn   string
	db    *gorm.DB
	fleet bool // the relays are fleets of one tenant (the suite's fleet group)
}

func newRelayEnv(t *testing.T, d testkit.Dialect) *relayEnv {
	t.Helper()
	dsn := d.NewDSN(t)
	db := d.Open(t, dsn, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	must(t, db.AutoMigrate(&Account{}))
	return &relayEnv{t: t, d: d, dsn: dsn, db: db, fleet: viaFleet(t)}
}

// operator opens the admin API on the outbox, waking r after its requeues.
func (e *relayEnv) operator(r relayer) *admin.Outbox {
	e.t.Helper()
	o, err := admin.Open(context.Background(), e.db, admin.Config{Wake: r.Wake})
	must(e.t, err)
	return o
}

// open returns another handle on the database, as another process has.
func (e *relayEnv) open() *gorm.DB {
	e.t.Helper()
	return e.d.Open(e.t, e.dsn, nil)
}

// write commits n accounts with k deposits each (Seq 0..k-1) and returns the
// event ids, in order per account.
func (e *relayEnv) write(n, k int) map[uuid.UUID][]uuid.UUID {
	e.t.Helper()
	out := map[uuid.UUID][]uuid.UUID{}
	for range n {
		a := &Account{ID: uuid.New()}
		for i := range k {
			a.Record(Deposited{AccountID: a.ID, Seq: i})
		}
		for _, p := range a.Records() {
			out[a.ID] = append(out[a.ID], p.ID)
		}
		must(e.t, e.db.Create(a).Error)
	}
	return out
}

// deposit commits k more deposits (Seq from) to each of the accounts and
// returns their ids, in order per account.
func (e *relayEnv) deposit(accounts []uuid.UUID, from, k int) map[uuid.UUID][]uuid.UUID {
	e.t.Helper()
	out := map[uuid.UUID][]uuid.UUID{}
	for _, id := range accounts {
		a := &Account{ID: id}
		for i := range k {
			a.Record(Deposited{AccountID: id, Seq: from + i})
		}
		for _, p := range a.Records() {
			out[id] = append(out[id], p.ID)
		}
		must(e.t, e.db.Model(a).Update("balance", from+k).Error)
	}
	return out
}

// writeOne commits an account with the event ev makes for it and returns the
// event id.
func (e *relayEnv) writeOne(ev func(account uuid.UUID) events.Event) (string, error) {
	a := &Account{ID: uuid.New()}
	a.Record(ev(a.ID))
	id := a.Records()[0].ID.String()
	return id, e.db.Create(a).Error
}

func withdrawn(a uuid.UUID) events.Event { return Withdrawn{AccountID: a} }
func deposited(a uuid.UUID) events.Event { return Deposited{AccountID: a, Seq: 100} }

// trickle writes a Deposited event (Seq 100) every interval, other traffic for
// the relay, until stop is called; stop returns the ids written.
func (e *relayEnv) trickle(every time.Duration) (stop func() []string) {
	done := make(chan struct{})
	var (
		ids []string
		wg  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			id, err := e.writeOne(deposited)
			if err != nil {
				e.t.Errorf("trickle: %v", err)
				return
			}
			ids = append(ids, id)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	stop = func() []string {
		once.Do(func() { close(done); wg.Wait() })
		return ids
	}
	e.t.Cleanup(func() { stop() })
	return stop
}

func (e *relayEnv) rows() []row { return testkit.Outbox(e.t, e.db) }

func (e *relayEnv) pending() int64 { return testkit.Pending(e.t, e.db) }

// strikes returns the highest strike count and attempt count in the outbox,
// and the dead count (in one cheap query: tests poll it).
func (e *relayEnv) strikes() (maxStrikes, maxAttempts, dead int) {
	e.t.Helper()
	must(e.t, e.db.Raw(`SELECT coalesce(max(strikes), 0), coalesce(max(attempts), 0),
  coalesce(sum(CASE WHEN dead_at IS NOT NULL THEN 1 ELSE 0 END), 0) FROM outbox_messages`).
		Row().Scan(&maxStrikes, &maxAttempts, &dead))
	return maxStrikes, maxAttempts, dead
}

// relayer is what a relay test runs: a relay.Relay, or in the suite's fleet
// group a fleet.Fleet whose one tenant is the test's outbox, relayed by a
// relay of the test's configuration.
type relayer interface {
	Run(ctx context.Context) error
	Wake()
	Stats(ctx context.Context) (relay.Stats, error)
}

// relay returns a relay on db (the writers' handle when nil), quiet unless
// cfg has a logger; in the fleet group, a fleet of one tenant on db.
func (e *relayEnv) relay(db *gorm.DB, pub message.Publisher, cfg relay.Config) relayer {
	e.t.Helper()
	if db == nil {
		db = e.db
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if e.fleet {
		return newFleetOfOne(e.t, db, pub, cfg)
	}
	r, err := relay.New(db, pub, cfg)
	must(e.t, err)
	return r
}

// run starts r and stops it when the test ends (or at stop). returned tells
// whether Run returned before it was cancelled, which it never should.
func (e *relayEnv) run(r relayer) (returned *atomic.Bool, stop func()) {
	return testkit.Run(e.t, r.Run)
}

func modeName(ordered bool) string {
	return map[bool]string{false: "unordered", true: "ordered"}[ordered]
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}
