package outboxhook

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
)

// Statement-instance keys (gorm.DB.InstanceSet) shared by one chain's callbacks.
const (
	keyPlan    = "herald:outbox:plan"    // *plan: events encoded by prepare
	keyOwnTx   = "herald:outbox:own_tx"  // true: prepare opened the transaction
	keyTracker = "herald:outbox:tracker" // *tracker owned by this chain
)

type trackerKey struct{}

// tracker lists the aggregates written inside one transaction that a chain (the
// outermost statement) opened, so that when that chain sees the commit succeed it
// can make all of them, association children included, forget their events.
type tracker struct {
	roots []*aggregate.Root
}

// plan holds the payloads prepare encoded, by event, for write to reuse.
type plan struct {
	encoded map[*aggregate.Pending]encodedEvent
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
	if _, ok := db.InstanceGet("gorm:started_transaction"); ok {
		p.track(db)
	}
	roots := collectRoots(db.Statement)
	if len(roots) == 0 {
		return
	}
	if !inTransaction(db) {
		tx := db.Begin()
		if tx.Error != nil {
			db.AddError(fmt.Errorf("outboxhook: begin transaction: %w", tx.Error))
			return
		}
		db.Statement.ConnPool = tx.Statement.ConnPool
		db.InstanceSet(keyOwnTx, true)
		p.track(db)
	}
	if err := p.settle(db, roots); err != nil {
		db.AddError(err)
		return
	}
	pl := &plan{encoded: map[*aggregate.Pending]encodedEvent{}}
	ctxMD := events.MetadataFromContext(db.Statement.Context)
	for _, r := range roots {
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
			pl.encoded[pe] = enc
		}
	}
	db.InstanceSet(keyPlan, pl)
}

// write runs after the model's After hooks, before GORM commits: it inserts the
// pending events of the aggregates the statement wrote, in one statement.
func (p *Plugin) write(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	if db.Statement.RowsAffected == 0 {
		// No row was written (Save's UPDATE that found no row, a conflict that did
		// nothing): the events stay pending for the chain that writes the row.
		return
	}
	roots := collectRoots(db.Statement)
	if len(roots) == 0 {
		return
	}
	var pl *plan
	if v, ok := db.InstanceGet(keyPlan); ok {
		pl = v.(*plan)
	}
	ctxMD := events.MetadataFromContext(db.Statement.Context)
	var (
		batch   batch
		written []*aggregate.Pending
	)
	for _, r := range roots {
		aggType, aggID, err := p.identify(db, r)
		if err != nil {
			p.fail(db, err)
			return
		}
		for _, pe := range r.root.Pending() {
			enc, ok := encodedEvent{}, false
			if pl != nil {
				enc, ok = pl.encoded[pe]
			}
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
			batch.add(env, enc)
			written = append(written, pe)
		}
	}
	if len(written) == 0 {
		return
	}
	xids, err := p.insertBatch(db.Statement.Context, db.Statement.ConnPool, &batch)
	if err != nil {
		p.fail(db, err)
		return
	}
	for _, pe := range written {
		if xid, ok := xids[pe.ID]; ok {
			pe.Tx, pe.Xid = db.Statement.ConnPool, xid
		}
	}
	if t, ok := db.Statement.Context.Value(trackerKey{}).(*tracker); ok {
		for _, r := range roots {
			t.roots = append(t.roots, r.root)
		}
	}
}

// finish runs after GORM's commit. It commits the transaction prepare opened, and
// when the chain's own transaction committed, makes every aggregate written in it
// forget the events it wrote.
func (p *Plugin) finish(db *gorm.DB) {
	v, ok := db.InstanceGet(keyTracker)
	if !ok {
		return
	}
	t := v.(*tracker)
	pool := t.pool(db)
	if _, own := db.InstanceGet(keyOwnTx); own {
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
	for _, r := range t.roots {
		r.Retain(func(pe *aggregate.Pending) bool { return pe.Tx != pool })
	}
}

// track installs a tracker in the statement's context for the transaction this
// chain owns, unless an outer chain already tracks it.
func (p *Plugin) track(db *gorm.DB) {
	if _, ok := db.Statement.Context.Value(trackerKey{}).(*tracker); ok {
		return
	}
	t := &tracker{}
	db.Statement.Context = context.WithValue(db.Statement.Context, trackerKey{}, t)
	db.InstanceSet(keyTracker, t)
	db.InstanceSet(keyTrackerPool, db.Statement.ConnPool)
}

const keyTrackerPool = "herald:outbox:tracker_pool"

// pool returns the transaction the tracker belongs to (GORM resets
// Statement.ConnPool after its commit, so it is remembered at track time).
func (t *tracker) pool(db *gorm.DB) any {
	v, _ := db.InstanceGet(keyTrackerPool)
	return v
}

// fail records err on the statement and, when the statement runs in a transaction
// the caller opened, aborts that transaction in PostgreSQL, so that a caller who
// ignores the error cannot commit the business row without its events.
func (p *Plugin) fail(db *gorm.DB, err error) {
	db.AddError(err)
	if _, started := db.InstanceGet("gorm:started_transaction"); started {
		return
	}
	if _, own := db.InstanceGet(keyOwnTx); own {
		return
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
	var xids []int64
	for _, r := range roots {
		for _, pe := range r.root.Pending() {
			if pe.Tx != nil && pe.Tx != pool {
				xids = append(xids, pe.Xid)
			}
		}
	}
	if len(xids) == 0 {
		return nil
	}
	rows, err := pool.QueryContext(db.Statement.Context,
		`SELECT x, pg_xact_status(x::text::xid8) FROM unnest($1::bigint[]) AS x`, xids)
	if err != nil {
		return fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
	}
	defer rows.Close()
	status := make(map[int64]string, len(xids))
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
			default: // aborted, or too old to know: write again (same id, consumers dedupe)
				pe.Tx, pe.Xid = nil, 0
				return true
			}
		})
	}
	return nil
}

// encode turns a record into what the outbox stores, checking its type and size.
func (p *Plugin) encode(rec events.Record, ctxMD events.Metadata) (encodedEvent, error) {
	typ, err := events.TypeOf(rec.Event)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("outboxhook: event %s (%T): %w", rec.ID, rec.Event, err)
	}
	payload, err := p.cfg.Codec.Marshal(rec.Event)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("%w %s (%s): %w", ErrEncode, rec.ID, typ, err)
	}
	if len(payload) > p.cfg.MaxPayloadBytes {
		return encodedEvent{}, fmt.Errorf("%w: event %s (%s) is %d bytes, limit %d",
			ErrPayloadTooLarge, rec.ID, typ, len(payload), p.cfg.MaxPayloadBytes)
	}
	md := []byte("{}")
	if merged := ctxMD.Merge(rec.Metadata); len(merged) > 0 {
		if md, err = json.Marshal(merged); err != nil {
			return encodedEvent{}, fmt.Errorf("%w %s (%s) metadata: %w", ErrEncode, rec.ID, typ, err)
		}
	}
	return encodedEvent{payload: payload, metadata: md, version: events.VersionOf(rec.Event), typ: typ}, nil
}

// rootRef is an aggregate found in a statement's model or destination.
type rootRef struct {
	root   *aggregate.Root
	model  any           // pointer to the model that embeds root
	value  reflect.Value // the model struct
	schema *schema.Schema
}

var aggregateType = reflect.TypeFor[aggregate.Aggregate]()

// collectRoots finds the aggregates with pending events in the statement's Model
// and Dest: a pointer to a struct, or a slice or array of structs or pointers.
// Values that cannot be addressed (a struct passed by value) are skipped.
func collectRoots(st *gorm.Statement) []rootRef {
	var out []rootRef
	seen := map[*aggregate.Root]bool{}
	visit := func(v reflect.Value) {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct || !v.CanAddr() {
			return
		}
		ptr := v.Addr()
		if !ptr.Type().Implements(aggregateType) {
			return
		}
		agg := ptr.Interface().(aggregate.Aggregate)
		r := agg.AggregateRoot()
		if r == nil || len(r.Pending()) == 0 || seen[r] {
			return
		}
		seen[r] = true
		out = append(out, rootRef{root: r, model: agg, value: v})
	}
	for _, x := range []any{st.Model, st.Dest} {
		if x == nil {
			continue
		}
		v := reflect.ValueOf(x)
		for v.Kind() == reflect.Pointer && !v.IsNil() && (v.Elem().Kind() == reflect.Pointer || v.Elem().Kind() == reflect.Slice || v.Elem().Kind() == reflect.Array) {
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Slice, reflect.Array:
			if !ptrOrStructElems(v.Type().Elem()) {
				continue
			}
			for i := 0; i < v.Len(); i++ {
				visit(v.Index(i))
			}
		default:
			visit(v)
		}
	}
	for i := range out {
		if st.Schema != nil && out[i].value.Type() == st.Schema.ModelType {
			out[i].schema = st.Schema
		}
	}
	return out
}

func ptrOrStructElems(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Interface
}

func (p *Plugin) schemaOf(db *gorm.DB, r rootRef) (*schema.Schema, error) {
	if r.schema != nil {
		return r.schema, nil
	}
	st := &gorm.Statement{DB: db}
	if err := st.Parse(r.model); err != nil {
		return nil, fmt.Errorf("outboxhook: parse %T: %w", r.model, err)
	}
	return st.Schema, nil
}

// checkIDAvailable fails before the write when an aggregate has no id and its
// write will not produce one (a zero primary key without a database default).
func (p *Plugin) checkIDAvailable(db *gorm.DB, r rootRef) error {
	if _, ok := r.model.(aggregate.Identified); ok {
		return nil // the model's own id is checked at write time
	}
	s, err := p.schemaOf(db, r)
	if err != nil {
		return err
	}
	if len(s.PrimaryFields) == 0 {
		return fmt.Errorf("%w: %T has no primary key (implement aggregate.Identified)", ErrEmptyAggregateID, r.model)
	}
	for _, f := range s.PrimaryFields {
		if _, zero := f.ValueOf(db.Statement.Context, r.value); zero && !f.HasDefaultValue && !f.AutoIncrement {
			return fmt.Errorf("%w: %T has a zero %s and no database default", ErrEmptyAggregateID, r.model, f.Name)
		}
	}
	return nil
}

// identify returns the aggregate type and id of r, after its row was written.
func (p *Plugin) identify(db *gorm.DB, r rootRef) (string, string, error) {
	var typ, id string
	if t, ok := r.model.(aggregate.Typed); ok {
		typ = t.AggregateType()
	}
	if i, ok := r.model.(aggregate.Identified); ok {
		id = i.AggregateID()
	}
	if typ == "" || id == "" {
		s, err := p.schemaOf(db, r)
		if err != nil {
			return "", "", err
		}
		if typ == "" {
			typ = s.Name
		}
		if id == "" {
			parts := make([]string, 0, len(s.PrimaryFields))
			for _, f := range s.PrimaryFields {
				v, zero := f.ValueOf(db.Statement.Context, r.value)
				if zero {
					parts = nil
					break
				}
				parts = append(parts, fmt.Sprint(v))
			}
			id = strings.Join(parts, ":")
		}
	}
	if id == "" {
		return "", "", fmt.Errorf("%w: %T (%s)", ErrEmptyAggregateID, r.model, typ)
	}
	return typ, id, nil
}

// batch is a set of envelopes as column arrays, inserted by one statement.
type batch struct {
	ids, types, aggTypes, aggIDs, topics, payloads, metadata []string
	versions                                                 []int32
	occurred                                                 []time.Time
}

func (b *batch) add(env events.Envelope, enc encodedEvent) {
	b.ids = append(b.ids, env.ID.String())
	b.types = append(b.types, env.Type)
	b.versions = append(b.versions, int32(env.Version))
	b.aggTypes = append(b.aggTypes, env.AggregateType)
	b.aggIDs = append(b.aggIDs, env.AggregateID)
	b.topics = append(b.topics, env.Topic)
	b.payloads = append(b.payloads, string(enc.payload))
	b.metadata = append(b.metadata, string(enc.metadata))
	b.occurred = append(b.occurred, env.OccurredAt)
}

// insertSQL returns the two INSERTs of the outbox: one for a single event, one
// for any number (the columns arrive as arrays, so its text, and its prepared
// plan, never change). Rows that exist are left alone. Each returns, per inserted
// row, its id, the 32-bit id of the (sub)transaction that inserted it (xmin) and
// the current top-level transaction id, from which xid64 widens the former.
func insertSQL(table string) (one, many string) {
	head := `INSERT INTO ` + quoteTable(table) + ` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at) `
	tail := ` ON CONFLICT (id) DO NOTHING RETURNING id::text, xmin::text::bigint, pg_current_xact_id()::text::bigint`
	return head + `VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)` + tail,
		head + `SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])` + tail
}

// xid64 widens xmin, a 32-bit (sub)transaction id of the current transaction, to
// the 64-bit full id pg_xact_status takes, using top, the current top-level full
// id: a subtransaction's id is never below its parent's, so xmin is in top's
// epoch unless it wrapped past 2^32 after top.
func xid64(xmin, top int64) int64 {
	epoch := top >> 32
	if xmin < top&0xFFFFFFFF {
		epoch++
	}
	return epoch<<32 | xmin
}

func quoteTable(table string) string {
	schema, name, _ := splitTable(table)
	if schema == "" {
		return `"` + name + `"`
	}
	return `"` + schema + `"."` + name + `"`
}

// insertBatch runs the insert on pool and returns the inserting transaction id
// of each row it inserted, by event id.
func (p *Plugin) insertBatch(ctx context.Context, pool gorm.ConnPool, b *batch) (map[uuid.UUID]int64, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if len(b.ids) == 1 {
		rows, err = pool.QueryContext(ctx, p.insertOne, b.ids[0], b.types[0], b.versions[0], b.aggTypes[0],
			b.aggIDs[0], b.topics[0], b.payloads[0], b.metadata[0], b.occurred[0])
	} else {
		rows, err = pool.QueryContext(ctx, p.insertMany, b.ids, b.types, b.versions, b.aggTypes, b.aggIDs,
			b.topics, b.payloads, b.metadata, b.occurred)
	}
	if err != nil {
		return nil, p.insertError(err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]int64, len(b.ids))
	for rows.Next() {
		var (
			id        string
			xmin, top int64
		)
		if err := rows.Scan(&id, &xmin, &top); err != nil {
			return nil, p.insertError(err)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, p.insertError(err)
		}
		out[u] = xid64(xmin, top)
	}
	if err := rows.Err(); err != nil {
		return nil, p.insertError(err)
	}
	return out, nil
}

func (p *Plugin) insertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: %s: %w", ErrTableMissing, p.cfg.Table, err)
	}
	return fmt.Errorf("outboxhook: insert into %s: %w", p.cfg.Table, err)
}
