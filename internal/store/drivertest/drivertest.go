package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

// Harness is what a driver's package gives the suite.
type Harness struct {
	// Driver is the driver under test.
	Driver store.Driver
	// SQL is the SQL the suite needs of the database beyond the driver's
	// methods (reading a row's raw columns, making a row due or dead).
	SQL testsql.SQL
	// Open returns a handle on a database of the test's own (a PostgreSQL
	// schema, an SQLite file, a MySQL database), empty, isolated from every
	// other test's and dropped when the test ends, with the settings Herald
	// asks of the database (SQLite: WAL, BEGIN IMMEDIATE, a busy timeout;
	// MySQL: clientFoundRows, parseTime, UTC). The handle is closed when the
	// test ends.
	Open func(t tb.TB) *sql.DB
}

type test struct {
	name string
	f    func(t tb.TB, e *env)
}

// Run runs the whole suite against h's driver, each test in parallel on a
// database of its own, as TestX/<interface>/<behaviour>. A driver's test
// passes its *testing.T (see tb.T).
func Run[T tb.T[T]](t T, h Harness) {
	for _, group := range []struct {
		name  string
		tests []test
	}{
		{"outbox", outboxTests},
		{"inbox", inboxTests},
		{"relay", relayTests},
		{"leases", leasesTests},
		{"admin", adminTests},
		{"waker", wakerTests},
		{"schedule", scheduleTests},
	} {
		t.Run(group.name, func(t T) {
			for _, tc := range group.tests {
				t.Run(tc.name, func(t T) {
					t.Parallel()
					tc.f(t, newEnv(t, h))
				})
			}
		})
	}
}

// env is one test's database with the default outbox (with the relay's
// tables) and inbox created.
type env struct {
	t     tb.TB
	ctx   context.Context
	db    *sql.DB
	drv   store.Driver
	sql   testsql.SQL
	table ident.Table
	out   store.Outbox
	rel   store.Relay
}

func newEnv(t tb.TB, h Harness) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), db: h.Open(t), drv: h.Driver, sql: h.SQL,
		table: ident.MustTable(store.DefaultOutbox)}
	e.out, e.rel = e.drv.Outbox(e.table), e.drv.Relay(e.table)
	must(t, e.out.Create(e.ctx, e.db))
	must(t, e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Retention: true}))
	must(t, e.drv.Inbox(ident.MustTable(store.DefaultInbox)).Create(e.ctx, e.db))
	return e
}

func must(t tb.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// event returns a new event of aggregate (typ, id) with its own id.
func event(typ, aggType, aggID string) store.Row {
	id := uuid.New()
	payload, _ := json.Marshal(map[string]string{"id": id.String()})
	return store.Row{ID: id.String(), Type: typ, Version: 1, AggregateType: aggType, AggregateID: aggID, Topic: typ,
		Payload: payload, Metadata: []byte(`{}`), OccurredAt: time.Now().UTC().Truncate(time.Microsecond)}
}

// insert inserts n events of type typ on aggregate ("account", aggID), in
// order, and returns them.
func (e *env) insert(typ, aggID string, n int) []store.Row {
	e.t.Helper()
	evs := make([]store.Row, n)
	for i := range evs {
		evs[i] = event(typ, "account", aggID)
	}
	got, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: evs})
	must(e.t, err)
	if got != int64(n) {
		e.t.Fatalf("Insert inserted %d of %d", got, n)
	}
	return evs
}

// exec runs q (with ? placeholders) on the test's database.
func (e *env) exec(q string, args ...any) int64 {
	e.t.Helper()
	res, err := e.db.ExecContext(e.ctx, e.sql.Rebind(q), args...)
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	n, err := res.RowsAffected()
	must(e.t, err)
	return n
}

// q is the quoted outbox table.
func (e *env) q() string { return e.drv.Quote(e.table) }

// row is an outbox row's raw columns, as the test SQL reads them.
type row struct {
	found             bool
	attempts, strikes int
	lastError         string
	processed, dead   bool
	wait              time.Duration // until available_at; negative when due
	failed            bool          // last_failed_at set
}

func (e *env) row(id string) row {
	e.t.Helper()
	var (
		r  row
		us int64
	)
	err := e.db.QueryRowContext(e.ctx, e.sql.Rebind(`SELECT attempts, strikes, coalesce(last_error, ''), processed_at IS NOT NULL,
  dead_at IS NOT NULL, last_failed_at IS NOT NULL, `+e.sql.MicrosUntil("available_at")+` FROM `+e.q()+` WHERE id = ?`), id).
		Scan(&r.attempts, &r.strikes, &r.lastError, &r.processed, &r.dead, &r.failed, &us)
	if err == sql.ErrNoRows {
		return r
	}
	must(e.t, err)
	r.found, r.wait = true, time.Duration(us)*time.Microsecond
	return r
}

// count counts the outbox rows.
func (e *env) count() int64 {
	e.t.Helper()
	var n int64
	must(e.t, e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.q()).Scan(&n))
	return n
}

// stamp sets the timestamp column of the outbox row id to ago before the
// database's now (a negative ago: after it).
func (e *env) stamp(id, column string, ago time.Duration) {
	e.t.Helper()
	at, arg := e.sql.Ago(ago)
	if e.exec(`UPDATE `+e.q()+` SET `+column+` = `+at+` WHERE id = ?`, arg, id) != 1 {
		e.t.Fatalf("stamp %s of %s: no row", column, id)
	}
}

// kill makes the outbox row id dead since ago, after a failure lastErr.
func (e *env) kill(id string, ago time.Duration, lastErr string) {
	e.t.Helper()
	at, arg := e.sql.Ago(ago)
	e.exec(`UPDATE `+e.q()+` SET dead_at = `+at+`, attempts = 3, strikes = 3, last_error = ? WHERE id = ?`, arg, lastErr, id)
}

// ids returns the claimed rows' ids.
func ids(cs []store.Row) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// evIDs returns the events' ids as strings.
func evIDs(evs []store.Row) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func sameIDs(t tb.TB, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// batch claims up to limit due events as the relay does in unordered mode,
// the rows held from other claims for hold; the batch is closed when the test
// ends.
func (e *env) batch(limit int, hold time.Duration) store.Batch {
	e.t.Helper()
	b, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: limit, Hold: hold})
	must(e.t, err)
	e.t.Cleanup(b.Close)
	return b
}

// ordered claims up to limit due events of the owned partitions (of
// partitions) as the relay does in ordered mode, its marks fenced by fence
// (nil: unfenced).
func (e *env) ordered(limit, partitions int, owned []int32, fence *store.Fence) store.Batch {
	e.t.Helper()
	b, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: limit,
		Ordered: &store.OrderedClaim{Partitions: partitions, Owned: owned, Fence: fence}})
	must(e.t, err)
	e.t.Cleanup(b.Close)
	return b
}

// claim claims up to limit due events as the relay does in unordered mode and
// ends the batch without marks (locks released; leases, of a minute, kept).
func (e *env) claim(limit int) []store.Row {
	e.t.Helper()
	b := e.batch(limit, time.Minute)
	b.Close()
	return b.Rows()
}

// jsonEqual reports whether a and b are the same JSON value (a database may
// store JSON in its own layout).
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}
