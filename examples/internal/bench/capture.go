package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"time"

	"github.com/heraldgo/herald/relay"
)

// A capturing database/sql driver: the statements the relay runs, with their
// arguments, so that the explain pass can ask the database for the plan of a
// claim exactly as a driver sent it (its text, its parameters). It wraps the
// driver registered under a name as "<name>-capture"; only the explain pass
// uses it (the timed runs go through the plain drivers).

type captured struct {
	query string
	args  []driver.NamedValue
}

var capture struct {
	sync.Mutex
	on    bool
	log   []captured
	times map[string]*stmtTime // when timing: per statement text
}

// stmtTime is how many times a statement ran and how long its calls took
// (QueryContext: until the first rows were there; ExecContext: all).
type stmtTime struct {
	n          int
	total, max time.Duration
}

// timingStart starts timing the statements (without keeping them).
func timingStart() {
	capture.Lock()
	capture.times = map[string]*stmtTime{}
	capture.Unlock()
}

// timingStop stops timing and returns the times by statement.
func timingStop() map[string]*stmtTime {
	capture.Lock()
	defer capture.Unlock()
	t := capture.times
	capture.times = nil
	return t
}

func timed(q string, d time.Duration) {
	capture.Lock()
	if capture.times != nil {
		st := capture.times[q]
		if st == nil {
			st = &stmtTime{}
			capture.times[q] = st
		}
		st.n++
		st.total += d
		st.max = max(st.max, d)
	}
	capture.Unlock()
}

// captureStart clears the log and starts recording.
func captureStart() {
	capture.Lock()
	capture.on, capture.log = true, nil
	capture.Unlock()
}

// captureStop stops recording and returns what was recorded.
func captureStop() []captured {
	capture.Lock()
	defer capture.Unlock()
	capture.on = false
	return capture.log
}

func record(q string, args []driver.NamedValue) {
	capture.Lock()
	if capture.on {
		capture.log = append(capture.log, captured{q, append([]driver.NamedValue(nil), args...)})
	}
	capture.Unlock()
}

var registerOnce sync.Map

// captureDriver registers (once) and returns the capturing driver name of
// database/sql driver name.
func captureDriver(name string) (string, error) {
	cname := name + "-capture"
	if _, loaded := registerOnce.LoadOrStore(cname, true); loaded {
		return cname, nil
	}
	db, err := sql.Open(name, "")
	if err != nil {
		return "", err
	}
	d := db.Driver()
	_ = db.Close()
	sql.Register(cname, capDriver{d})
	return cname, nil
}

type capDriver struct{ d driver.Driver }

func (c capDriver) Open(name string) (driver.Conn, error) {
	cn, err := c.d.Open(name)
	if err != nil {
		return nil, err
	}
	return capConn{cn}, nil
}

type capConn struct{ driver.Conn }

func (c capConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	t0 := time.Now()
	rows, err := qc.QueryContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		timed(q, time.Since(t0))
		record(q, args)
	}
	return rows, err
}

func (c capConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	t0 := time.Now()
	res, err := ec.ExecContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		timed(q, time.Since(t0))
		record(q, args)
	}
	return res, err
}

func (c capConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var (
		st  driver.Stmt
		err error
	)
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = pc.PrepareContext(ctx, q)
	} else {
		st, err = c.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return capStmt{st, q}, nil
}

func (c capConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bc, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bc.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the wrapped driver's only way
}

func (c capConn) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c capConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c capConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c capConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

type capStmt struct {
	driver.Stmt
	q string
}

func (s capStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	record(s.q, args)
	if qc, ok := s.Stmt.(driver.StmtQueryContext); ok {
		t0 := time.Now()
		rows, err := qc.QueryContext(ctx, args)
		timed(s.q, time.Since(t0))
		return rows, err
	}
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return s.Stmt.Query(vals) //nolint:staticcheck // the wrapped driver's only way
}

func (s capStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	record(s.q, args)
	if ec, ok := s.Stmt.(driver.StmtExecContext); ok {
		t0 := time.Now()
		res, err := ec.ExecContext(ctx, args)
		timed(s.q, time.Since(t0))
		return res, err
	}
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return s.Stmt.Exec(vals) //nolint:staticcheck // the wrapped driver's only way
}

func (s capStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// captureRelay runs a relay with cfg (its publisher discarding, its logger
// silent) on the database dsn through the capturing driver until it
// published want events, and returns the statements it ran.
func captureRelay(bdb benchDB, dsn string, cfg relay.Config, want int) ([]captured, error) {
	cdb, err := openCapture(bdb, dsn)
	if err != nil {
		return nil, err
	}
	defer closeGorm(cdb)
	cp := &countingPublisher{Publisher: discardPublisher{}, want: int64(want), done: make(chan struct{})}
	cfg.Logger = discardLogger()
	r, err := relay.New(cdb, cp, cfg)
	if err != nil {
		return nil, err
	}
	captureStart()
	err = runUntil(r.Run, cp.done)
	log := captureStop()
	return log, err
}
