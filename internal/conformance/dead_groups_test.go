package conformance

// Dead events by group (admin.Outbox.DeadGroups, RequeueGroup, PurgeGroup,
// Audit) on every database: 10,000 dead events in 5 groups, acted on a group
// at a time with one statement per thousand events, idempotently, with a dry
// run and an audit trail; a requeued group keeps each aggregate's order.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestDeadGroups(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		t.Run("TenThousandInFiveGroups", func(t *testing.T) { testDeadGroupsBulk(t, dl) })
		t.Run("RequeuedGroupKeepsOrder", func(t *testing.T) { testDeadGroupOrdered(t, dl) })
	})
}

// The five groups' errors, as SQL over seq (each event's text differs), and
// what they normalise to. The fifth group is of another type.
func deadGroupErrors(mysqlDB bool) (sqls, want []string) {
	cat := func(parts ...string) string {
		if mysqlDB {
			return "CONCAT(" + strings.Join(parts, ", ") + ")"
		}
		return strings.Join(parts, " || ")
	}
	return []string{
			cat("'timeout after 5s to 10.0.0.'", "(seq % 200)"),
			cat("'order '", "seq", "' not found'"),
			cat("'dial tcp 10.1.'", "(seq % 250)", "'.7:5672: connection refused'"),
			cat("'broker said: rejected message '", "seq", "' (quota 100)'"),
			cat("'schema mismatch at field '", "(seq % 7)"),
		}, []string{
			"timeout after <n>s to <ip>",
			"order <n> not found",
			"dial tcp <ip>: connection refused",
			"broker said: rejected message <n> (quota <n>)",
			"schema mismatch at field <n>",
		}
}

func testDeadGroupsBulk(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	e.write(100, 100) // 10,000 events, 100 per transaction
	// Five groups by seq % 5; group 1 half dead for three days, half for
	// an hour; group 4 of another type.
	errs, want := deadGroupErrors(dl.Name == "mysql")
	for g := range 5 {
		at, arg := dl.Ago(time.Duration(g+1) * time.Hour)
		must(t, e.db.Exec(`UPDATE outbox_messages SET dead_at = `+at+`, attempts = 12, strikes = 11, last_error = `+errs[g]+
			fmt.Sprintf(` WHERE seq %% 5 = %d`, g), arg).Error)
	}
	old, arg := dl.Ago(72 * time.Hour)
	must(t, e.db.Exec(`UPDATE outbox_messages SET dead_at = `+old+` WHERE seq % 5 = 1 AND seq % 2 = 0`, arg).Error)
	must(t, e.db.Exec(`UPDATE outbox_messages SET type = 'account.flagged' WHERE seq % 5 = 4`).Error)

	ctx := context.Background()
	var statements atomic.Int64
	o, err := admin.Open(ctx, countingDB(t, dl, e.dsn, &statements), admin.Config{Logger: quiet()})
	must(t, err)
	stmts := func(what string, max int64, f func()) {
		t.Helper()
		before := statements.Load()
		start := time.Now()
		f()
		n := statements.Load() - before
		t.Logf("%s: %d statements, %s", what, n, time.Since(start).Round(time.Millisecond))
		if n > max {
			t.Fatalf("%s: %d statements, want at most %d (one per batch, not per event)", what, n, max)
		}
	}

	var gs admin.DeadGroups
	stmts("DeadGroups over 10,000", 4, func() { gs, err = o.DeadGroups(ctx, 0); must(t, err) })
	if gs.Scanned != 10000 || gs.Truncated || len(gs.Groups) != 5 {
		t.Fatalf("DeadGroups: scanned %d, truncated %v, %d groups", gs.Scanned, gs.Truncated, len(gs.Groups))
	}
	byErr := map[string]admin.DeadGroup{}
	for _, g := range gs.Groups {
		byErr[g.Error] = g
		if g.Events != 2000 || g.FirstSeen.After(g.LastSeen) || admin.NormalizeError(g.Sample) != g.Error {
			t.Fatalf("group %+v", g)
		}
	}
	for i, w := range want {
		g, ok := byErr[w]
		if !ok {
			t.Fatalf("no group %q in %+v", w, gs.Groups)
		}
		if wantType := map[bool]string{false: "account.deposited", true: "account.flagged"}[i == 4]; g.Type != wantType {
			t.Fatalf("group %q of type %s, want %s", w, g.Type, wantType)
		}
	}
	if g := byErr[want[1]]; g.LastSeen.Sub(g.FirstSeen) < 60*time.Hour {
		t.Fatalf("group 1 seen from %s to %s, want 70h apart", g.FirstSeen, g.LastSeen)
	}
	if limited, err := o.DeadGroups(ctx, 2); err != nil || len(limited.Groups) != 2 || limited.More != 3 {
		t.Fatalf("DeadGroups(2) = %d groups, more %d, %v", len(limited.Groups), limited.More, err)
	}
	if small, err := admin.Open(ctx, e.db, admin.Config{DeadGroupScan: 3000}); err != nil {
		t.Fatal(err)
	} else if s, err := small.DeadGroups(ctx, 0); err != nil || s.Scanned != 3000 || !s.Truncated {
		t.Fatalf("DeadGroupScan 3000: scanned %d, truncated %v, %v", s.Scanned, s.Truncated, err)
	}

	key := func(i int) admin.DeadGroupKey {
		t.Helper()
		k, err := admin.ParseDeadGroupKey(byErr[want[i]].Key)
		must(t, err)
		return k
	}
	dead := func() int64 {
		t.Helper()
		st, err := o.Status(ctx)
		must(t, err)
		return st.Total.Dead
	}

	// A dry run counts and changes nothing, records nothing.
	res, err := o.RequeueGroup(ctx, key(0), admin.GroupAction{DryRun: true, By: "alice"})
	if err != nil || res.Events != 2000 || !res.DryRun {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	if n := dead(); n != 10000 {
		t.Fatalf("after a dry run %d dead", n)
	}
	if a, err := o.Audit(ctx, 10); err != nil || len(a) != 0 {
		t.Fatalf("audit after a dry run: %+v, %v", a, err)
	}

	// The requeue: a statement per thousand events; a second one finds none.
	stmts("RequeueGroup of 2,000", 16, func() {
		res, err = o.RequeueGroup(ctx, key(0), admin.GroupAction{By: "alice"})
	})
	if err != nil || res.Events != 2000 {
		t.Fatalf("RequeueGroup = %+v, %v", res, err)
	}
	if res, err = o.RequeueGroup(ctx, key(0), admin.GroupAction{By: "alice"}); err != nil || res.Events != 0 {
		t.Fatalf("the same RequeueGroup again = %+v, %v, want nothing", res, err)
	}
	if n := dead(); n != 8000 {
		t.Fatalf("after the requeue %d dead, want 8000", n)
	}
	// An event of the group that dies again after the listing is not the
	// listed group's: the old key leaves it.
	var seq int64
	must(t, e.db.Raw(`SELECT min(seq) FROM outbox_messages WHERE seq % 5 = 0`).Row().Scan(&seq))
	now, arg := dl.Ago(0)
	must(t, e.db.Exec(`UPDATE outbox_messages SET dead_at = `+now+`, last_error = 'timeout after 5s to 10.0.0.1' WHERE seq = ?`, arg, seq).Error)
	if res, err = o.RequeueGroup(ctx, key(0), admin.GroupAction{}); err != nil || res.Events != 0 {
		t.Fatalf("the old key after a new death = %+v, %v, want nothing", res, err)
	}

	// Purge with a retention: the half dead for three days goes, the rest
	// stays.
	stmts("PurgeGroup of 1,000 of 2,000", 16, func() {
		res, err = o.PurgeGroup(ctx, key(1), admin.GroupAction{By: "bob", OlderThan: 24 * time.Hour})
	})
	if err != nil || res.Events != 1000 {
		t.Fatalf("PurgeGroup older than 1d = %+v, %v", res, err)
	}
	stmts("PurgeGroup of 2,000", 16, func() {
		res, err = o.PurgeGroup(ctx, key(2), admin.GroupAction{By: "bob"})
	})
	if err != nil || res.Events != 2000 {
		t.Fatalf("PurgeGroup = %+v, %v", res, err)
	}
	if n := dead(); n != 8000+1-3000 {
		t.Fatalf("after the purges %d dead, want 5001", n)
	}
	if n := count(t, e.db, "outbox_messages"); n != 7000 {
		t.Fatalf("%d rows after the purges, want 7000", n)
	}

	// The trail, newest first.
	a, err := o.Audit(ctx, 10)
	must(t, err)
	wantAudit := []struct {
		action, by string
		events     int64
	}{{"purge-group", "bob", 2000}, {"purge-group", "bob", 1000}, {"requeue-group", "unknown", 0}, {"requeue-group", "alice", 0}, {"requeue-group", "alice", 2000}}
	if len(a) != len(wantAudit) {
		t.Fatalf("audit: %+v", a)
	}
	for i, w := range wantAudit {
		if a[i].Action != w.action || a[i].By != w.by || a[i].Events != w.events || a[i].At.IsZero() || time.Since(a[i].At) > time.Hour {
			t.Fatalf("audit[%d] = %+v, want %+v", i, a[i], w)
		}
	}
	if !strings.Contains(a[1].Detail, `older_than=24h0m0s`) || !strings.Contains(a[0].Detail, `error="dial tcp <ip>: connection refused"`) {
		t.Fatalf("audit details: %q, %q", a[0].Detail, a[1].Detail)
	}
}

// In ordered mode a requeued group comes back in each aggregate's order, even
// when its events died in another order.
func testDeadGroupOrdered(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	ids := e.write(10, 5)
	i := 0
	for _, evs := range ids {
		for j := range evs { // the later events died first
			i++
			dl.KillEvent(t, e.db, evs[j], time.Duration(i)*time.Minute, fmt.Sprintf("nack from 10.0.0.%d after %dms", i%9, i))
		}
	}
	ctx := context.Background()
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	r := e.relay(nil, pub, relay.Config{Ordered: true, PollInterval: 20 * time.Millisecond, BatchSize: 7})
	o, err := admin.Open(ctx, e.db, admin.Config{Wake: r.Wake, Logger: quiet()})
	must(t, err)
	gs, err := o.DeadGroups(ctx, 0)
	must(t, err)
	if len(gs.Groups) != 1 || gs.Groups[0].Events != 50 {
		t.Fatalf("groups: %+v", gs.Groups)
	}
	k, err := admin.ParseDeadGroupKey(gs.Groups[0].Key)
	must(t, err)
	e.run(r)
	if res, err := o.RequeueGroup(ctx, k, admin.GroupAction{By: "test"}); err != nil || res.Events != 50 {
		t.Fatalf("RequeueGroup = %+v, %v", res, err)
	}
	eventually(t, 20*time.Second, "50 events", func() bool { return got.Distinct() == 50 })
	testkit.CheckOrder(t, ids, got)
}

// countingDB opens GORM on dsn through a pool whose connections count the
// statements they run (Exec and Query, prepared or not) in n.
func countingDB(t *testing.T, dl testkit.Dialect, dsn string, n *atomic.Int64) *gorm.DB {
	t.Helper()
	plain, err := dl.Open(t, dsn, nil).DB()
	must(t, err)
	sqlDB := sql.OpenDB(countingConnector{drv: plain.Driver(), dsn: dsn, n: n})
	t.Cleanup(func() { _ = sqlDB.Close() })
	var d gorm.Dialector
	switch dl.Name {
	case "postgres":
		d = postgres.New(postgres.Config{Conn: sqlDB})
	case "mysql":
		d = mysql.New(mysql.Config{Conn: sqlDB})
	default:
		d = sqlite.New(sqlite.Config{Conn: sqlDB})
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	must(t, err)
	return db
}

type countingConnector struct {
	drv driver.Driver
	dsn string
	n   *atomic.Int64
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, n: c.n}, nil
}

func (c countingConnector) Driver() driver.Driver { return c.drv }

// countingConn counts the statements run on it, forwarding what the
// driver's connection does.
type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, q)
	} else {
		s, err = c.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: s, n: c.n}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Begin() //nolint:staticcheck // the driver's own fallback
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	x, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := x.ExecContext(ctx, q, args)
	if err != driver.ErrSkip { //nolint:errorlint // the driver returns it as is
		c.n.Add(1)
	}
	return res, err
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	x, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := x.QueryContext(ctx, q, args)
	if err != driver.ErrSkip { //nolint:errorlint // the driver returns it as is
		c.n.Add(1)
	}
	return rows, err
}

func (c *countingConn) CheckNamedValue(v *driver.NamedValue) error {
	if x, ok := c.Conn.(driver.NamedValueChecker); ok {
		return x.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if x, ok := c.Conn.(driver.SessionResetter); ok {
		return x.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if x, ok := c.Conn.(driver.Validator); ok {
		return x.IsValid()
	}
	return true
}

func (c *countingConn) Ping(ctx context.Context) error {
	if x, ok := c.Conn.(driver.Pinger); ok {
		return x.Ping(ctx)
	}
	return nil
}

type countingStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.Add(1)
	if x, ok := s.Stmt.(driver.StmtExecContext); ok {
		return x.ExecContext(ctx, args)
	}
	return nil, fmt.Errorf("statement without ExecContext")
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.Add(1)
	if x, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return x.QueryContext(ctx, args)
	}
	return nil, fmt.Errorf("statement without QueryContext")
}

func (s *countingStmt) CheckNamedValue(v *driver.NamedValue) error {
	if x, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return x.CheckNamedValue(v)
	}
	return driver.ErrSkip
}
