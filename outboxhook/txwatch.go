package outboxhook

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/recorded"
)

// The plugin wraps the connection pool of the *gorm.DB it is registered on, so
// that every transaction begun through it is a txn: the plugin sees its
// savepoints, its commit and its rollback, whoever opened it (GORM's own
// transaction around a write, db.Transaction, db.Begin, CreateInBatches). That
// is how aggregates forget their events exactly when the transaction that wrote
// them commits, on every database, with no query to ask.

// pool wraps a *gorm.DB's connection pool: its transactions are txns.
type pool struct {
	gorm.ConnPool // the wrapped pool: *sql.DB, or what another plugin put there
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
	return &txn{ConnPool: inner, pool: c}, nil
}

// GetDBConn returns the *sql.DB under the wrapped pool, for gorm.DB.DB().
func (c *pool) GetDBConn() (*sql.DB, error) {
	switch p := c.ConnPool.(type) {
	case *sql.DB:
		return p, nil
	case gorm.GetDBConnector:
		return p.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
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
type txn struct {
	gorm.ConnPool // the wrapped transaction: *sql.Tx, or another plugin's
	pool          *pool

	mu       sync.Mutex
	written  []*recorded.Entry
	marks    []savepoint
	notify   bool  // events were written (Add): notify at commit
	poison   error // set when an outbox write failed: the transaction must not commit
	poisonAt int   // len(marks) when poisoned: a rollback to an earlier savepoint clears it
}

type savepoint struct {
	name    string
	written int // len(written) when the savepoint was set
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

// ExecContext runs query in the transaction and follows its savepoints.
func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.ConnPool.ExecContext(ctx, query, args...)
	if err == nil {
		t.observe(query)
	}
	return res, err
}

// Commit commits the transaction, then marks every entry written in it
// committed and wakes the relay. A transaction in which an outbox write failed
// is rolled back instead, and the failure returned.
func (t *txn) Commit() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	t.mu.Lock()
	written, notify, poison := t.written, t.notify, t.poison
	t.written, t.notify, t.marks = nil, false, nil
	t.mu.Unlock()
	if poison != nil {
		_ = c.Rollback()
		return fmt.Errorf("outboxhook: transaction rolled back, an outbox write in it failed: %w", poison)
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

// Rollback rolls the transaction back; its entries stay pending.
func (t *txn) Rollback() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	t.mu.Lock()
	t.written, t.notify, t.marks, t.poison = nil, false, nil, nil
	t.mu.Unlock()
	return c.Rollback()
}

// StmtContext binds a prepared statement to the transaction (gorm.Tx, for
// PrepareStmt).
func (t *txn) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if s, ok := t.ConnPool.(interface {
		StmtContext(context.Context, *sql.Stmt) *sql.Stmt
	}); ok {
		return s.StmtContext(ctx, stmt)
	}
	return stmt
}

// GetDBConn returns the *sql.DB the transaction was begun on.
func (t *txn) GetDBConn() (*sql.DB, error) { return t.pool.GetDBConn() }

// observe follows SAVEPOINT, ROLLBACK TO [SAVEPOINT] and RELEASE [SAVEPOINT],
// the statements GORM's dialectors (and raw SQL) use for nested transactions.
func (t *txn) observe(query string) {
	if len(query) < 8 {
		return
	}
	switch query[0] {
	case 'S', 's', 'R', 'r':
	default:
		return
	}
	q := strings.TrimSpace(query)
	var op, rest string
	switch {
	case cutFold(&q, &rest, "SAVEPOINT "):
		op = "set"
	case cutFold(&q, &rest, "ROLLBACK TO SAVEPOINT "), cutFold(&q, &rest, "ROLLBACK TO "):
		op = "rollback"
	case cutFold(&q, &rest, "RELEASE SAVEPOINT "), cutFold(&q, &rest, "RELEASE "):
		op = "release"
	default:
		return
	}
	name := strings.Trim(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ";")), "\"`")
	t.mu.Lock()
	defer t.mu.Unlock()
	if op == "set" {
		t.marks = append(t.marks, savepoint{name: name, written: len(t.written), notify: t.notify})
		return
	}
	i := len(t.marks) - 1
	for i >= 0 && t.marks[i].name != name {
		i--
	}
	if i < 0 {
		return
	}
	if op == "release" {
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

func cutFold(q, rest *string, prefix string) bool {
	if len(*q) >= len(prefix) && strings.EqualFold((*q)[:len(prefix)], prefix) {
		*rest = (*q)[len(prefix):]
		return true
	}
	return false
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

// adopt runs before GORM begins a statement's transaction: a handle made before
// db.Use still holds the unwrapped pool; it gets the wrapper, so that the
// transaction is seen.
func (p *Plugin) adopt(db *gorm.DB) {
	if p.raw != nil && reflect.TypeOf(db.Statement.ConnPool) == reflect.TypeOf(p.raw) &&
		reflect.TypeOf(p.raw).Comparable() && db.Statement.ConnPool == p.raw {
		db.Statement.ConnPool = p.wrapped
	}
}
