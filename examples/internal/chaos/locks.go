package main

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the driver timedSQLite wraps
)

// SQLite has one write lock, and its DSN's _txlock=immediate makes every
// transaction take it at BEGIN. To tell who held it while an application save
// waited, every chaos process opens SQLite through timedSQLite, which writes
// each transaction (and each write outside one) that held the lock at least
// lockLogMin to a file of its own in lockDir; the orchestrator reads them all
// for the slow saves (lockHolders).

// timedSQLiteDriver prefixes the names timedSQLite registers.
const timedSQLiteDriver = "sqlite_chaos_timed"

// lockLogMin is the shortest lock holding written down.
const lockLogMin = 50 * time.Millisecond

// lockDir is where the processes write their lock holdings ("" : nowhere):
// the run's temporary directory.
var lockDir string

var (
	lockOnce sync.Once
	lockMu   sync.Mutex
	lockFile *os.File
	drivers  sync.Map // app → its registered driver name
)

// timedSQLite is the name of the driver to open SQLite with for app (the
// pool's role, e.g. chaos_relay_2), registered on first use.
func timedSQLite(app string) string {
	if name, ok := drivers.Load(app); ok {
		return name.(string)
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		panic(err)
	}
	defer func() { _ = db.Close() }()
	name := timedSQLiteDriver + "_" + app
	if _, loaded := drivers.LoadOrStore(app, name); !loaded {
		sql.Register(name, timedDriver{d: db.Driver(), app: app})
	}
	return name
}

// logHold writes down a holding of the write lock from began to ended, by
// what (a transaction, a statement).
func logHold(app, what string, began, ended time.Time) {
	if ended.Sub(began) < lockLogMin || lockDir == "" {
		return
	}
	lockOnce.Do(func() {
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("locks-%d", os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err == nil {
			lockFile = f
		}
	})
	lockMu.Lock()
	defer lockMu.Unlock()
	if lockFile != nil {
		_, _ = fmt.Fprintf(lockFile, "%d %d %s/%d %s\n", began.UnixNano(), ended.UnixNano(), app, os.Getpid(), what)
	}
}

// hold is one holding of the write lock, read back.
type hold struct {
	began, ended time.Time
	who, what    string // app/pid
	pid          int
}

// readHolds reads every process's holdings in dir.
func readHolds(dir string) []hold {
	var out []hold
	readLogLines(dir, "locks-", func(line string) {
		parts := strings.SplitN(line, " ", 4)
		if len(parts) < 4 {
			return
		}
		b, err1 := strconv.ParseInt(parts[0], 10, 64)
		e, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		_, p, _ := strings.Cut(parts[2], "/")
		pid, _ := strconv.Atoi(p)
		out = append(out, hold{began: time.Unix(0, b), ended: time.Unix(0, e), who: parts[2], what: parts[3], pid: pid})
	})
	slices.SortFunc(out, func(a, b hold) int { return a.began.Compare(b.began) })
	return out
}

// readLogLines calls line with each line of the files in dir whose names
// begin with prefix (the processes' logs); a file that cannot be opened is
// skipped.
func readLogLines(dir, prefix string, line func(string)) {
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line(sc.Text())
		}
		_ = f.Close()
	}
}

// timedDriver wraps the SQLite driver; its connections time their
// transactions.
type timedDriver struct {
	d   driver.Driver
	app string
}

func (t timedDriver) Open(name string) (driver.Conn, error) {
	c, err := t.d.Open(name)
	if err != nil {
		return nil, err
	}
	return &timedConn{Conn: c, app: t.app}, nil
}

// timedConn passes everything to the driver's connection, timing its
// transactions and its writes outside them.
type timedConn struct {
	driver.Conn
	app  string
	inTx bool
}

func (c *timedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	asked := time.Now()
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = c.Conn.Begin() //nolint:staticcheck // the driver has no BeginTx
	}
	if err != nil {
		return nil, err
	}
	c.inTx = true
	return &timedTx{Tx: tx, c: c, began: time.Now(), asked: asked}, nil
}

func (c *timedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *timedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	began := time.Now()
	r, err := e.ExecContext(ctx, query, args)
	if !c.inTx {
		logHold(c.app, "statement, its wait for the lock included: "+firstWords(query), began, time.Now())
	}
	return r, err
}

func (c *timedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return q.QueryContext(ctx, query, args)
}

func (c *timedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *timedConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *timedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// timedTx writes down its holding of the lock when it ends.
type timedTx struct {
	driver.Tx
	c            *timedConn
	asked, began time.Time
}

func (t *timedTx) end(err error, how string) error {
	t.c.inTx = false
	logHold(t.c.app, fmt.Sprintf("transaction (%s; waited %v to begin)", how, t.began.Sub(t.asked).Round(time.Millisecond)), t.began, time.Now())
	return err
}

func (t *timedTx) Commit() error   { return t.end(t.Tx.Commit(), "commit") }
func (t *timedTx) Rollback() error { return t.end(t.Tx.Rollback(), "rollback") }

// firstWords is the start of query, for the log.
func firstWords(query string) string {
	f := strings.Fields(query)
	return strings.Join(f[:min(len(f), 4)], " ")
}

// lockHolders describes, for a save that waited from began to ended, who
// held the write lock meanwhile (holdings of lockLogMin or more).
func lockHolders(hs []hold, began, ended time.Time) string {
	var parts []string
	for _, h := range hs {
		if h.ended.Before(began) || h.began.After(ended) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s held it %v from %s (%s)", h.who, h.ended.Sub(h.began).Round(time.Millisecond),
			h.began.Format("15:04:05.000"), h.what))
	}
	if len(parts) == 0 {
		return "no holding of 50ms or more written down"
	}
	return strings.Join(parts, "; ")
}

// holdersSummary sums, by role (the app without its instance), how long the
// holdings overlapped the slow saves.
func holdersSummary(hs []hold, saves [][2]time.Time) string {
	by := map[string]time.Duration{}
	for _, s := range saves {
		for _, h := range hs {
			from, to := maxTime(h.began, s[0]), minTime(h.ended, s[1])
			if to.After(from) {
				by[role(h.who)] += to.Sub(from)
			}
		}
	}
	if len(by) == 0 {
		return "none written down (holdings of 50ms or more)"
	}
	var parts []string
	for who, d := range by {
		parts = append(parts, fmt.Sprintf("%s %v", who, d.Round(time.Millisecond)))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// role is a holder's app without its pid and instance: chaos_relay_2/123 is
// chaos_relay.
func role(who string) string {
	app, _, _ := strings.Cut(who, "/")
	if i := strings.LastIndexByte(app, '_'); i > 0 && strings.Count(app, "_") > 1 {
		app = app[:i]
	}
	return app
}
