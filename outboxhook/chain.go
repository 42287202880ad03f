package outboxhook

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/recorded"
	"github.com/heraldgo/herald/internal/store"
)

// A chain is one run of GORM's create, update or delete callbacks: one statement.
// Its three Herald callbacks share a chainState, kept in the statement's Settings
// and checked against the statement (Settings are copied to statements derived
// from it, which are judged on their own).

type stateKey struct{}

type chainState struct {
	stmt    *gorm.Statement // the statement it belongs to
	roots   []rootRef       // the aggregates in the statement's Model and Dest
	encoded map[*recorded.Entry]encodedEvent
	ownTx   bool              // prepare opened the transaction (SkipDefaultTransaction)
	blind   bool              // an upsert whose count cannot tell whether it wrote its row
	written []*recorded.Entry // written in ownTx when it is not a txn: marked at its commit
}

func stateOf(db *gorm.DB) *chainState {
	if v, ok := db.Statement.Settings.Load(stateKey{}); ok {
		if s := v.(*chainState); s.stmt == db.Statement {
			return s
		}
	}
	return nil
}

type encodedEvent struct {
	payload  []byte
	metadata []byte          // md, encoded
	md       events.Metadata // the event's metadata, as stored
	version  int
	typ      string
	sched    events.Schedule
}

// op is one of GORM's write chains, with the model hooks that run in it: a hook
// may record events, so a statement whose model has one needs a transaction
// even when nothing is pending yet.
type op struct {
	name  string
	hooks func(s *schema.Schema) bool
}

var (
	opCreate = op{"create", func(s *schema.Schema) bool { return s.BeforeSave || s.BeforeCreate || s.AfterCreate || s.AfterSave }}
	opUpdate = op{"update", func(s *schema.Schema) bool { return s.BeforeSave || s.BeforeUpdate || s.AfterUpdate || s.AfterSave }}
	opDelete = op{"delete", func(s *schema.Schema) bool { return s.BeforeDelete || s.AfterDelete }}
)

// prepare runs before the model's Before hooks. It refuses aggregates it could
// not update (passed by value), opens a transaction when the statement may
// write events and none is open (SkipDefaultTransaction), settles events written
// in transactions whose end it could not see, and encodes and checks every
// pending event so that bad input fails the statement before any row is written.
func (p *Plugin) prepare(o op) func(db *gorm.DB) {
	return func(db *gorm.DB) {
		if db.Error != nil || db.DryRun {
			return
		}
		roots, err := collectRoots(db.Statement)
		if err != nil {
			db.AddError(err)
			return
		}
		if len(roots) == 0 {
			return
		}
		pending := 0
		for _, r := range roots {
			pending += len(r.list.Pending())
		}
		blind := o.name == opCreate.name && p.caps.Has(store.FoundRows) && updatesNothingOnConflict(db.Statement)
		if blind && pending > 0 {
			db.AddError(fmt.Errorf("%w (%d pending events): create without the ON CONFLICT clause, or upsert with UpdateAll or DoUpdates",
				ErrAmbiguousUpsert, pending))
			return
		}
		hooks := !db.Statement.SkipHooks && db.Statement.Schema != nil && o.hooks(db.Statement.Schema)
		if pending == 0 && !hooks {
			return
		}
		st := &chainState{stmt: db.Statement, roots: roots, blind: blind}
		db.Statement.Settings.Store(stateKey{}, st)
		if !inTransaction(db) {
			p.adopt(db)
			tx := db.Begin()
			if tx.Error != nil {
				db.AddError(fmt.Errorf("outboxhook: begin transaction: %w", tx.Error))
				return
			}
			db.Statement.ConnPool = tx.Statement.ConnPool
			st.ownTx = true
		}
		if pending == 0 {
			return
		}
		if err := p.settle(db, roots); err != nil {
			db.AddError(err)
			return
		}
		st.encoded = make(map[*recorded.Entry]encodedEvent, pending)
		ctxMD := contextMetadata(db.Statement.Context)
		for _, r := range roots {
			entries := r.list.Pending()
			if !hasEvents(entries) {
				if err := p.checkChanges(entries); err != nil {
					db.AddError(err)
					return
				}
				continue
			}
			if err := p.checkIDAvailable(db, r); err != nil {
				db.AddError(err)
				return
			}
			for _, e := range entries {
				if e.Change != nil {
					if err := p.checkChanges([]*recorded.Entry{e}); err != nil {
						db.AddError(err)
						return
					}
					continue
				}
				enc, err := p.encode(e.Record, ctxMD)
				if err != nil {
					db.AddError(err)
					return
				}
				st.encoded[e] = enc
			}
		}
	}
}

// write runs after the model's After hooks, before GORM commits: it inserts the
// pending events of the aggregates the statement wrote, in one statement, and
// applies their pending cancels and moves. An aggregate's entries go in the
// order recorded: a cancel or move is applied after the events recorded
// before it are inserted (a cancel of a key scheduled in the same save
// cancels it), and before those recorded after it.
func (p *Plugin) write(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	st := stateOf(db)
	if st == nil {
		return
	}
	if db.Statement.RowsAffected == 0 {
		// No row was written (Save's UPDATE that found no row, a conflict that did
		// nothing): the events stay pending for the chain that writes the row.
		return
	}
	ctxMD := contextMetadata(db.Statement.Context)
	var (
		steps   []step // batches of events and the changes between them, in order
		b       batch
		batched []*recorded.Entry // the entries of b
		written []*recorded.Entry
		nEvents int
		locks   []int64
		holders int
	)
	flush := func() {
		if len(batched) > 0 {
			steps = append(steps, step{b: b, entries: batched})
			b, batched = batch{}, nil
		}
	}
	for _, r := range st.roots {
		entries := r.list.Pending()
		if len(entries) == 0 {
			continue
		}
		holders++
		var aggType, aggID string
		if hasEvents(entries) {
			var err error
			if aggType, aggID, err = p.identify(db, r); err != nil {
				p.fail(db, err)
				return
			}
			if r.serialize() {
				locks = append(locks, aggregateLockKey(aggType, aggID))
			}
		}
		for _, e := range entries {
			if e.Change != nil {
				flush()
				steps = append(steps, step{change: e})
				written = append(written, e)
				continue
			}
			enc, ok := st.encoded[e]
			if !ok { // recorded by a hook, after prepare
				var err error
				if enc, err = p.encode(e.Record, ctxMD); err != nil {
					p.fail(db, err)
					return
				}
			}
			env := events.Envelope{
				ID: e.Record.ID, Type: enc.typ, Version: enc.version,
				AggregateType: aggType, AggregateID: aggID,
				OccurredAt: e.Record.OccurredAt, Metadata: enc.md,
			}
			env.Topic = p.cfg.Topic(&env)
			b.add(env, enc)
			batched = append(batched, e)
			written = append(written, e)
			nEvents++
		}
	}
	flush()
	if len(written) == 0 {
		return
	}
	if st.blind { // events recorded by a hook, after prepare
		p.fail(db, fmt.Errorf("%w (%d events or changes recorded by a hook)", ErrAmbiguousUpsert, len(written)))
		return
	}
	if len(st.roots) > 1 && db.Statement.RowsAffected < int64(len(st.roots)) {
		// Some rows of a multi-row statement were not written (a DELETE of rows
		// already gone, an insert that skipped conflicting rows), and nothing
		// says which: writing every aggregate's events could publish events of
		// rows that were never written, writing none could lose some.
		p.fail(db, fmt.Errorf("%w: %d of %d rows written, %d aggregates with pending events or changes",
			ErrPartialWrite, db.Statement.RowsAffected, len(st.roots), holders))
		return
	}
	pool := db.Statement.ConnPool
	ctx := db.Statement.Context
	if err := p.lockAggregates(ctx, pool, locks); err != nil {
		p.fail(db, err)
		return
	}
	t := txnOf(pool)
	// Unwatched: a transaction this plugin cannot watch (begun on a pool it
	// does not wrap, or on db.Connection's connection before the plugin saw
	// it): note what tells a later save whether it committed. Token 0 where
	// the database hands out none (a later save can then only look the row
	// up: see settle). A change applied there counts as committed at once.
	unwatched := t == nil && !st.ownTx
	strict := requireRescheduled(ctx)
	for _, s := range steps {
		if s.change != nil {
			if err := p.apply(db, s.change, strict); err != nil {
				p.fail(db, err)
				return
			}
			continue
		}
		_, tokens, err := p.insertBatch(ctx, pool, &s.b, unwatched)
		if err != nil {
			p.fail(db, err)
			return
		}
		for _, e := range s.entries {
			if unwatched {
				e.Unobserved = &recorded.Unobserved{Pool: pool, Token: tokens[e.Record.ID]}
			} else {
				e.Unobserved = nil
			}
		}
	}
	switch {
	case t != nil: // the end of the transaction will be seen: by the txn
		t.wrote(written, false)
	case st.ownTx: // or by finish
		st.written = append(st.written, written...)
	default:
		for _, e := range written {
			if e.Change != nil {
				e.MarkCommitted()
			}
		}
		if nEvents > 0 {
			p.notify()
		}
	}
}

// step is one step of write: a batch of events to insert, or a change to apply.
type step struct {
	b       batch
	entries []*recorded.Entry // b's
	change  *recorded.Entry
}

// hasEvents reports whether entries hold an event (not only changes).
func hasEvents(entries []*recorded.Entry) bool {
	for _, e := range entries {
		if e.Change == nil {
			return true
		}
	}
	return false
}

// finish runs after GORM's commit. It ends the transaction prepare opened and,
// when that was not a txn, marks what the statement wrote committed.
func (p *Plugin) finish(db *gorm.DB) {
	st := stateOf(db)
	if st == nil || !st.ownTx {
		return
	}
	if db.Error != nil {
		db.Rollback()
	} else {
		db.Commit()
	}
	db.Statement.ConnPool = db.ConnPool
	if db.Error == nil && len(st.written) > 0 {
		for _, e := range st.written {
			e.MarkCommitted()
		}
		p.notify()
	}
}

func (p *Plugin) notify() {
	if p.cfg.Notify != nil {
		p.cfg.Notify()
	}
}

// fail records err on the statement and makes sure its transaction cannot
// commit: a txn refuses to (unless a savepoint set before is rolled back to);
// another transaction is aborted in the database.
func (p *Plugin) fail(db *gorm.DB, err error) {
	db.AddError(err)
	p.abort(db, err)
}

// abort makes the transaction db runs in, if any, unable to commit the writes
// made so far: an outbox write of it failed.
func (p *Plugin) abort(db *gorm.DB, err error) {
	if t := txnOf(db.Statement.ConnPool); t != nil {
		t.fail(err)
		return
	}
	if inTransaction(db) {
		p.out.Abort(db.Statement.Context, db.Statement.ConnPool)
	}
}

// updatesNothingOnConflict reports whether the statement has an ON CONFLICT
// clause that leaves a conflicting row alone: DoNothing, or neither DoUpdates
// nor UpdateAll (which MySQL's dialector renders as ON DUPLICATE KEY UPDATE
// pk = pk). Read before the statement is built: building it there rewrites
// the clause into that assignment.
func updatesNothingOnConflict(st *gorm.Statement) bool {
	c, ok := st.Clauses["ON CONFLICT"]
	if !ok {
		return false
	}
	oc, ok := c.Expression.(clause.OnConflict)
	return ok && !oc.UpdateAll && len(oc.DoUpdates) == 0
}

func inTransaction(db *gorm.DB) bool {
	c, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok && c != nil && !reflect.ValueOf(c).IsNil()
}

// settle resolves pending events that were written in a transaction this plugin
// could not watch, other than the current one: committed ones are forgotten;
// those of a rolled-back transaction are written again. It costs a query only
// when such events exist.
//
// An event is written again only on proof that its transaction did not
// commit: the database's word on the transaction (PostgreSQL, whose token is
// the transaction id). Where there is no token (SQLite, MySQL) only the row
// can be looked up, and a row not found proves nothing: it may have been
// published and deleted by the relay, or cancelled, after its transaction
// committed. Writing it again would publish it twice, or bring a cancelled
// event back; such an event is forgotten instead, as committed (should its
// transaction have rolled back, it is lost: see docs/limits.md).
func (p *Plugin) settle(db *gorm.DB, roots []rootRef) error {
	pool := db.Statement.ConnPool
	var (
		ws      []store.Written
		entries []*recorded.Entry
	)
	for _, r := range roots {
		for _, e := range r.list.Pending() {
			if u := e.Unobserved; u != nil && u.Pool != pool && e.Change == nil {
				ws = append(ws, store.Written{ID: e.Record.ID, Token: u.Token})
				entries = append(entries, e)
			}
		}
	}
	if len(ws) == 0 {
		return nil
	}
	outcomes, err := p.out.Settle(db.Statement.Context, pool, ws)
	if err != nil {
		return fmt.Errorf("outboxhook: settle earlier writes: %w", err)
	}
	for i, e := range entries {
		switch outcomes[i] {
		case store.Committed:
			e.MarkCommitted()
		case store.InProgress: // another open transaction: the insert waits for it
		default:
			if e.Unobserved.Token == 0 { // the row is not found: no proof of a rollback
				e.MarkCommitted()
				continue
			}
			e.Unobserved = nil // rolled back: write again (same id)
		}
	}
	for _, r := range roots {
		r.list.Pending() // drop what committed
	}
	return nil
}
