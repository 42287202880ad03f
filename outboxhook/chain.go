package outboxhook

import (
	"context"
	"fmt"
	"reflect"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
)

// A chain is one run of GORM's create, update or delete callbacks: one statement.
// Its three Herald callbacks share a chainState, kept in the statement's Settings.

type stateKey struct{}

type chainState struct {
	stmt    *gorm.Statement // the statement it belongs to (Settings are copied to nested statements)
	roots   []rootRef       // the aggregates in the statement's Model and Dest
	encoded map[*aggregate.Pending]encodedEvent
	ownTx   bool          // prepare opened the transaction (SkipDefaultTransaction)
	tracker *tracker      // set when this chain owns the transaction and will see it end
	txPool  gorm.ConnPool // that transaction (GORM resets Statement.ConnPool after commit)
}

func stateOf(db *gorm.DB) *chainState {
	if v, ok := db.Statement.Settings.Load(stateKey{}); ok {
		if s := v.(*chainState); s.stmt == db.Statement {
			return s
		}
	}
	return nil
}

type trackerKey struct{}

// tracker lists the aggregates written inside one transaction that a chain (the
// outermost statement) opened, so that when that chain sees the commit succeed it
// can make all of them, association children included, forget their events. It
// travels in the statement's context, which nested statements inherit.
type tracker struct {
	roots []*aggregate.Root
}

type encodedEvent struct {
	payload  []byte
	metadata []byte
	version  int
	typ      string
}

// prepare runs before the model's Before hooks. It opens a transaction when the
// statement has events and none is open (SkipDefaultTransaction), settles events
// left marked by an earlier transaction, and encodes and checks every pending event
// so that bad input fails the statement before any row is written.
func (p *Plugin) prepare(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	_, tracked := db.Statement.Context.Value(trackerKey{}).(*tracker)
	_, started := db.InstanceGet("gorm:started_transaction")
	roots := collectRoots(db.Statement)
	pending := 0
	for _, r := range roots {
		pending += len(r.root.Pending())
	}
	if len(roots) == 0 && (tracked || !started) {
		return // nothing to write, nothing to track
	}
	st := &chainState{stmt: db.Statement, roots: roots}
	db.Statement.Settings.Store(stateKey{}, st)
	if pending > 0 && !inTransaction(db) {
		tx := db.Begin()
		if tx.Error != nil {
			db.AddError(fmt.Errorf("outboxhook: begin transaction: %w", tx.Error))
			return
		}
		db.Statement.ConnPool = tx.Statement.ConnPool
		st.ownTx, started = true, true
	}
	if started && !tracked {
		st.tracker, st.txPool = &tracker{}, db.Statement.ConnPool
		db.Statement.Context = context.WithValue(db.Statement.Context, trackerKey{}, st.tracker)
	}
	if pending == 0 {
		return
	}
	if err := p.settle(db, roots); err != nil {
		db.AddError(err)
		return
	}
	st.encoded = make(map[*aggregate.Pending]encodedEvent, pending)
	ctxMD := events.MetadataFromContext(db.Statement.Context)
	for _, r := range roots {
		if len(r.root.Pending()) == 0 {
			continue
		}
		if err := p.checkIDAvailable(db, r); err != nil {
			db.AddError(err)
			return
		}
		for _, pe := range r.root.Pending() {
			enc, err := p.encode(pe.Record, ctxMD)
			if err != nil {
				db.AddError(err)
				return
			}
			st.encoded[pe] = enc
		}
	}
}

// write runs after the model's After hooks, before GORM commits: it inserts the
// pending events of the aggregates the statement wrote, in one statement.
func (p *Plugin) write(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	st := stateOf(db)
	if st == nil || len(st.roots) == 0 {
		return
	}
	if db.Statement.RowsAffected == 0 {
		// No row was written (Save's UPDATE that found no row, a conflict that did
		// nothing): the events stay pending for the chain that writes the row.
		return
	}
	ctxMD := events.MetadataFromContext(db.Statement.Context)
	var (
		b       batch
		written []*aggregate.Pending
		wrote   []*aggregate.Root
	)
	for _, r := range st.roots {
		if len(r.root.Pending()) == 0 {
			continue
		}
		aggType, aggID, err := p.identify(db, r)
		if err != nil {
			p.fail(db, err)
			return
		}
		for _, pe := range r.root.Pending() {
			enc, ok := st.encoded[pe]
			if !ok { // recorded by an After hook, after prepare
				if enc, err = p.encode(pe.Record, ctxMD); err != nil {
					p.fail(db, err)
					return
				}
			}
			env := events.Envelope{
				ID: pe.ID, Type: enc.typ, Version: enc.version,
				AggregateType: aggType, AggregateID: aggID,
				OccurredAt: pe.OccurredAt,
			}
			env.Topic = p.cfg.Topic(&env)
			b.add(env, enc)
			written = append(written, pe)
		}
		wrote = append(wrote, r.root)
	}
	if len(written) == 0 {
		return
	}
	// In a transaction a chain of ours opened, finish sees the commit: the events
	// are forgotten then, and no transaction id is needed. In one the caller
	// opened, the id lets a later save learn whether it committed.
	pool := db.Statement.ConnPool
	t, tracked := db.Statement.Context.Value(trackerKey{}).(*tracker)
	xids, err := p.insertBatch(db.Statement.Context, pool, &b, !tracked)
	if err != nil {
		p.fail(db, err)
		return
	}
	for _, pe := range written {
		if tracked {
			pe.Tx, pe.Xid = pool, 0 // 0: if the commit fails, the next save writes them again
		} else if xid, ok := xids[pe.ID]; ok {
			pe.Tx, pe.Xid = pool, xid
		}
	}
	if tracked {
		t.roots = append(t.roots, wrote...)
	} else if p.cfg.Notify != nil {
		p.cfg.Notify()
	}
}

// finish runs after GORM's commit. It commits the transaction prepare opened, and
// when the chain's own transaction committed, makes every aggregate written in it
// forget the events it wrote.
func (p *Plugin) finish(db *gorm.DB) {
	st := stateOf(db)
	if st == nil || st.tracker == nil {
		return
	}
	if st.ownTx {
		if db.Error != nil {
			db.Rollback()
		} else {
			db.Commit()
		}
		db.Statement.ConnPool = db.ConnPool
	}
	if db.Error != nil {
		return // rolled back, or the commit failed: the events stay pending
	}
	for _, r := range st.tracker.roots {
		r.Retain(func(pe *aggregate.Pending) bool { return pe.Tx != st.txPool })
	}
	if len(st.tracker.roots) > 0 && p.cfg.Notify != nil {
		p.cfg.Notify()
	}
}

// fail records err on the statement and, when the statement runs in a transaction
// the caller opened, aborts that transaction in PostgreSQL, so that a caller who
// ignores the error cannot commit the business row without its events.
func (p *Plugin) fail(db *gorm.DB, err error) {
	db.AddError(err)
	if _, tracked := db.Statement.Context.Value(trackerKey{}).(*tracker); tracked {
		return // GORM or prepare opened the transaction and rolls it back
	}
	p.abort(db)
}

// abort puts the transaction db runs in, if any, into PostgreSQL's failed state:
// its COMMIT then rolls back.
func (p *Plugin) abort(db *gorm.DB) {
	if inTransaction(db) {
		_, _ = db.Statement.ConnPool.ExecContext(context.WithoutCancel(db.Statement.Context),
			`DO $$BEGIN RAISE EXCEPTION 'herald: an outbox write of this transaction failed; roll it back'; END$$`)
	}
}

func inTransaction(db *gorm.DB) bool {
	c, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok && c != nil && !reflect.ValueOf(c).IsNil()
}

// settle resolves pending events that an earlier, different transaction wrote:
// committed ones are forgotten; those of a rolled-back (sub)transaction are written
// again. Events written earlier in the current transaction are simply written
// again: the insert ignores rows that exist, and re-inserts those a rolled-back
// savepoint removed. It costs a query only when such events exist.
func (p *Plugin) settle(db *gorm.DB, roots []rootRef) error {
	pool := db.Statement.ConnPool
	var (
		xids  []int64
		stale bool
	)
	for _, r := range roots {
		for _, pe := range r.root.Pending() {
			if pe.Tx != nil && pe.Tx != pool {
				stale = true
				if pe.Xid != 0 {
					xids = append(xids, pe.Xid)
				}
			}
		}
	}
	if !stale {
		return nil
	}
	status := make(map[int64]string, len(xids))
	if len(xids) > 0 {
		if err := queryStatus(db.Statement.Context, pool, xids, status); err != nil {
			return err
		}
	}
	for _, r := range roots {
		r.root.Retain(func(pe *aggregate.Pending) bool {
			if pe.Tx == nil || pe.Tx == pool {
				return true
			}
			switch status[pe.Xid] {
			case "committed":
				return false
			case "in progress": // another open transaction: the insert waits for it
				return true
			default: // aborted, a failed commit of ours (Xid 0), or too old to know:
				// write again (same id: the insert or the consumers' inbox dedupe)
				pe.Tx, pe.Xid = nil, 0
				return true
			}
		})
	}
	return nil
}

// queryStatus asks PostgreSQL whether each transaction in xids committed.
func queryStatus(ctx context.Context, pool gorm.ConnPool, xids []int64, status map[int64]string) error {
	rows, err := pool.QueryContext(ctx,
		`SELECT x, pg_xact_status(x::text::xid8) FROM unnest($1::bigint[]) AS x`, xids)
	if err != nil {
		return fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			x int64
			s *string
		)
		if err := rows.Scan(&x, &s); err != nil {
			return fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
		}
		if s != nil {
			status[x] = *s
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
	}
	return nil
}
