package outboxhook

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/recorded"
	"github.com/heraldgo/herald/internal/store"
)

// The plugin wraps the connection pool of the *gorm.DB it is registered on, so
// that every transaction begun through it is a txn: the plugin sees its
// savepoints, its commit and its rollback, whoever opened it (GORM's own
// transaction around a write, db.Transaction, db.Begin, CreateInBatches). That
// is how aggregates forget their events exactly when the transaction that wrote
// them commits, on every database, with no query to ask.
//
// db.Connection hands its function a statement whose pool is a *sql.Conn
// taken from the *sql.DB, past the wrapper. The first statement run through
// it (adopt) wraps that connection too, and the wrapper stays on the
// function's *gorm.DB, whose statement GORM shares: a transaction begun on
// the connection after that is a txn. One begun before (tx.Transaction as the
// function's first call) is not seen (see settle).

// pool wraps a *gorm.DB's connection pool, or a *sql.Conn of it: its
// transactions are txns.
type pool struct {
	gorm.ConnPool // the wrapped pool: *sql.DB, or what another plugin put there; or a *sql.Conn
	p             *Plugin
}

// BeginTx begins a transaction on the wrapped pool and returns it as a txn.
func (c *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var (
		inner gorm.ConnPool
		err   error
	)
	switch b := c.ConnPool.(type) {
	case gorm.TxBeginner:
		var tx *sql.Tx
		if tx, err = b.BeginTx(ctx, opts); err == nil {
			inner = tx
		}
	case gorm.ConnPoolBeginner:
		inner, err = b.BeginTx(ctx, opts)
	default:
		err = gorm.ErrInvalidTransaction
	}
	if err != nil {
		return nil, err
	}
	return &txn{ConnPool: inner, pool: c, ctx: ctx}, nil
}

// GetDBConn returns the *sql.DB under the wrapped pool, for gorm.DB.DB(). A
// wrapped *sql.Conn has none, as GORM sees it unwrapped.
func (c *pool) GetDBConn() (*sql.DB, error) {
	switch p := c.ConnPool.(type) {
	case *sql.DB:
		return p, nil
	case gorm.GetDBConnector:
		return p.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// sqlDB returns the *sql.DB the pool's transactions are begun on: for a
// wrapped *sql.Conn, the plugin's (db.Connection takes its connections from
// it), as GORM finds it under a bare *sql.Tx.
func (c *pool) sqlDB() (*sql.DB, error) {
	if _, ok := c.ConnPool.(*sql.Conn); ok && c.p.wrapped != nil {
		return c.p.wrapped.GetDBConn()
	}
	return c.GetDBConn()
}

// PrepareContext prepares query on the wrapped pool and remembers what it is:
// with PrepareStmt, GORM runs statements prepared here in transactions
// (txn.StmtContext).
func (c *pool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	st, err := c.ConnPool.PrepareContext(ctx, query)
	if err == nil {
		c.p.stmts.remember(st, query)
	}
	return st, err
}

// Ping pings the wrapped pool, if it can be pinged.
func (c *pool) Ping() error {
	if p, ok := c.ConnPool.(interface{ Ping() error }); ok {
		return p.Ping()
	}
	return nil
}

// txn is a transaction begun through a pool. It notes the outbox entries
// written in it, forgets those a ROLLBACK TO SAVEPOINT undid, and marks the rest
// committed when its COMMIT succeeds.
//
// Following statements is a shortcut, not what correctness rests on: a
// statement that may have undone outbox rows and that the plugin cannot
// follow exactly (a ROLLBACK in a spelling it does not parse, one to a
// savepoint it did not see set, a failed statement, which MySQL may answer by
// rolling the whole transaction back, a prepared statement it did not see
// prepared, a *sql.Tx handed out by SQLTx) leaves the transaction in doubt,
// and its Commit then looks the entries up in the outbox table, in the
// transaction, before it commits: only those found are marked.
type txn struct {
	gorm.ConnPool // the wrapped transaction: *sql.Tx, or another plugin's
	pool          *pool
	ctx           context.Context // BeginTx's: the transaction's life

	mu       sync.Mutex
	written  []*recorded.Entry
	marks    []savepoint
	notify   bool  // events were written (Add): notify at commit
	doubt    bool  // rows may have been undone unseen: Commit looks the entries up
	poison   error // set when an outbox write failed: the transaction must not commit
	poisonAt int   // len(marks) when poisoned: a rollback to an earlier savepoint clears it
}

type savepoint struct {
	name    string // as the database compares it (savepointStmt.name)
	written int    // len(written) when the savepoint was set
	notify  bool
}

func (t *txn) wrote(entries []*recorded.Entry, notify bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written = append(t.written, entries...)
	t.notify = t.notify || notify || len(entries) > 0
}

// fail makes the transaction unable to commit: its Commit rolls back and
// returns err, unless a savepoint set before the failure is rolled back to.
func (t *txn) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.poison == nil {
		t.poison, t.poisonAt = err, len(t.marks)
	}
}

// suspect puts the transaction in doubt (see txn).
func (t *txn) suspect() {
	t.mu.Lock()
	t.doubt = true
	t.mu.Unlock()
}

// ExecContext runs query in the transaction and follows its savepoints.
func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.ConnPool.ExecContext(ctx, query, args...)
	t.ran(parseStatement(query), err)
	return res, err
}

// QueryContext runs query in the transaction and follows its savepoints.
func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := t.ConnPool.QueryContext(ctx, query, args...)
	t.ran(parseStatement(query), err)
	return rows, err
}

// QueryRowContext runs query in the transaction and follows its savepoints.
func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	row := t.ConnPool.QueryRowContext(ctx, query, args...)
	t.ran(parseStatement(query), row.Err())
	return row
}

// PrepareContext prepares query in the transaction and remembers what it is,
// for StmtContext.
func (t *txn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	st, err := t.ConnPool.PrepareContext(ctx, query)
	if err == nil {
		t.pool.p.stmts.remember(st, query)
	}
	return st, err
}

// StmtContext binds a prepared statement to the transaction (gorm.Tx, for
// PrepareStmt, which runs every statement so) and follows its savepoints as
// ExecContext does, from the text it was prepared with. A statement prepared
// where the plugin did not see it puts the transaction in doubt.
func (t *txn) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if s, known := t.pool.p.stmts.lookup(stmt); known {
		t.ran(s, nil)
	} else {
		t.suspect()
	}
	if s, ok := t.ConnPool.(interface {
		StmtContext(context.Context, *sql.Stmt) *sql.Stmt
	}); ok {
		return s.StmtContext(ctx, stmt)
	}
	return stmt
}

// Commit commits the transaction, then marks every entry written in it
// committed and wakes the relay. A transaction in which an outbox write failed
// is rolled back instead, and the failure returned. A transaction in doubt
// first looks its entries up: those no longer in the outbox stay pending.
func (t *txn) Commit() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	t.mu.Lock()
	written, notify, poison, doubt := t.written, t.notify, t.poison, t.doubt
	t.written, t.notify, t.marks, t.doubt = nil, false, nil, false
	t.mu.Unlock()
	if poison != nil {
		_ = c.Rollback()
		return fmt.Errorf("outboxhook: transaction rolled back, an outbox write in it failed: %w", poison)
	}
	if doubt && len(written) > 0 {
		written = t.stillWritten(written)
	}
	if err := c.Commit(); err != nil {
		return err // the entries stay pending: the next save writes them again, under the same ids
	}
	for _, e := range written {
		e.MarkCommitted()
	}
	if notify {
		t.pool.p.notify()
	}
	return nil
}

// stillWritten returns the entries whose rows the transaction still holds.
// When they cannot be looked up (the WAL outbox has no rows) or the lookup
// fails, none: they stay pending, and the next save of their aggregates writes
// them again (under the same ids: at worst published twice).
func (t *txn) stillWritten(written []*recorded.Entry) []*recorded.Entry {
	f, ok := t.pool.p.out.(store.Finder)
	if !ok || t.pool.p.cfg.Storage == StorageWAL {
		return nil
	}
	// A cancel or move leaves no row to look up: it stays pending, and the
	// next save applies it again (a cancel that did commit then finds
	// nothing left to cancel).
	written = slices.DeleteFunc(written, func(e *recorded.Entry) bool { return e.Change != nil })
	if len(written) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(written))
	for _, e := range written {
		ids = append(ids, e.Record.ID)
	}
	found, err := f.Present(t.ctx, t.ConnPool, ids)
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(written, func(e *recorded.Entry) bool { return !found[e.Record.ID] })
}

// Rollback rolls the transaction back; its entries stay pending.
func (t *txn) Rollback() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	t.mu.Lock()
	t.written, t.notify, t.marks, t.poison, t.doubt = nil, false, nil, nil, false
	t.mu.Unlock()
	return c.Rollback()
}

// GetDBConn returns the *sql.DB the transaction was begun on.
func (t *txn) GetDBConn() (*sql.DB, error) { return t.pool.sqlDB() }

// ran follows a statement the transaction ran: SAVEPOINT, ROLLBACK TO and
// RELEASE as GORM's dialectors (and raw SQL) spell them. A failed statement,
// or one that may roll back and is not a ROLLBACK TO of a savepoint seen set,
// puts the transaction in doubt.
func (t *txn) ran(s savepointStmt, err error) {
	if err != nil {
		t.suspect()
		return
	}
	if s.op == spNone {
		if s.mayRollBack {
			t.suspect()
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.op == spSet {
		t.marks = append(t.marks, savepoint{name: s.name, written: len(t.written), notify: t.notify})
		return
	}
	i := len(t.marks) - 1
	for i >= 0 && t.marks[i].name != s.name {
		i--
	}
	if i < 0 {
		if s.op == spRollback {
			t.doubt = true
		}
		return
	}
	if s.op == spRelease {
		t.marks = t.marks[:i]
		return
	}
	// ROLLBACK TO keeps the savepoint and undoes what followed it.
	m := t.marks[i]
	clear(t.written[m.written:])
	t.written, t.notify, t.marks = t.written[:m.written], m.notify, t.marks[:i+1]
	if t.poison != nil && t.poisonAt > i {
		t.poison = nil
	}
}

// txnOf returns the txn c is, or wraps, or nil.
func txnOf(c gorm.ConnPool) *txn {
	switch t := c.(type) {
	case *txn:
		return t
	case *gorm.PreparedStmtTX:
		if x, ok := t.Tx.(*txn); ok {
			return x
		}
	}
	return nil
}

// wrapPool puts a pool around db's connection pool (or, with PrepareStmt, around
// the pool under GORM's prepared-statement cache), once. It returns the pool it
// wrapped, to recognise handles made before db.Use, and the wrapper.
func (p *Plugin) wrapPool(db *gorm.DB) {
	switch cp := db.ConnPool.(type) {
	case *pool:
		p.raw, p.wrapped = cp.ConnPool, cp
	case *gorm.PreparedStmtDB:
		if w, ok := cp.ConnPool.(*pool); ok {
			p.raw, p.wrapped = w.ConnPool, w
			return
		}
		w := &pool{ConnPool: cp.ConnPool, p: p}
		p.raw, p.wrapped = cp.ConnPool, w
		cp.ConnPool = w
	default:
		w := &pool{ConnPool: cp, p: p}
		p.raw, p.wrapped = cp, w
		db.ConnPool = w
		if db.Statement != nil && db.Statement.ConnPool == cp {
			db.Statement.ConnPool = w
		}
	}
}

// adopt runs first in every chain of callbacks, before GORM begins a
// statement's transaction: a handle made before db.Use still holds the
// unwrapped pool; it gets the wrapper, so that the transaction is seen. A
// *sql.Conn (db.Connection's) is wrapped in a pool of its own, left on the
// statement: db.Connection's function shares it, so that a transaction it
// begins later on the connection is seen too.
func (p *Plugin) adopt(db *gorm.DB) {
	if c, ok := db.Statement.ConnPool.(*sql.Conn); ok {
		if c != nil {
			db.Statement.ConnPool = &pool{ConnPool: c, p: p}
		}
		return
	}
	if p.raw != nil && reflect.TypeOf(db.Statement.ConnPool) == reflect.TypeOf(p.raw) &&
		reflect.TypeOf(p.raw).Comparable() && db.Statement.ConnPool == p.raw {
		db.Statement.ConnPool = p.wrapped
	}
}
