package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Catalog looks up whether what o makes exists (its table, index or column;
// for a step, whether its check returns a row).
type Catalog func(ctx context.Context, x store.Execer, o store.Object) (bool, error)

// CatalogAll looks up, in one statement, whether what each of objs (tables,
// indexes and columns; no step) makes exists.
type CatalogAll func(ctx context.Context, x store.Execer, objs []store.Object) ([]bool, error)

// One is the Catalog that looks an object up through all, alone; a step by
// running its check.
func One(all CatalogAll) Catalog {
	return func(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
		if o.Kind == store.KindStep {
			return sqlkit.Found(ctx, x, o.Check)
		}
		found, err := all(ctx, x, []store.Object{o})
		if err != nil {
			return false, err
		}
		return found[0], nil
	}
}

// CreateMissing makes, of objs, the tables and indexes that exists says are
// missing, and the columns and replacing indexes (store.Object.Replaces) of the
// tables it made in this call that are missing (a table made by an earlier
// migration and altered by a later one). It never alters a table that was
// there before but to add an index (one that replaces another only when
// that other is not there), and runs no step: an outdated table is
// for Migrate, and CheckSchema names the migration. It adds no index to a
// table that was there and lacks a column of objs either (the index may be on
// that column, which a later migration adds with it). An index whose creation
// fails is left out when skip says so. A role without DDL rights works where
// everything exists.
func CreateMissing(ctx context.Context, x store.Execer, objs []store.Object, exists Catalog, skip func(name string, err error) bool) error {
	made := map[string]bool{}
	outdated := map[string]bool{} // by table that was there: lacks a column
	isOutdated := func(t ident.Table) (bool, error) {
		if v, ok := outdated[t.String()]; ok {
			return v, nil
		}
		for _, c := range objs {
			if c.Kind != store.KindColumn || c.Name != t || c.Optional {
				continue
			}
			ok, err := exists(ctx, x, c)
			if err != nil {
				return false, fmt.Errorf("look up %s: %w", describe(c), err)
			}
			if !ok {
				outdated[t.String()] = true
				return true, nil
			}
		}
		outdated[t.String()] = false
		return false, nil
	}
	for _, o := range objs {
		switch o.Kind {
		case store.KindStep:
			continue
		case store.KindColumn:
			if !made[o.Name.String()] {
				continue
			}
		case store.KindIndex:
			if o.Replaces && !made[o.On.String()] {
				// On a table that was there, dropping what it replaces is a
				// change for Migrate; with none of that there, it is a
				// missing index like any other.
				replaced, err := anyIndex(ctx, x, o.On, o.Drops, exists)
				if err != nil {
					return err
				}
				if replaced {
					continue
				}
			}
			if !made[o.On.String()] {
				old, err := isOutdated(o.On)
				if err != nil {
					return err
				}
				if old {
					continue
				}
				// An index on an optional column the table lacks is
				// Migrate's, with the column.
				lacks, err := lacksOptional(ctx, x, o, objs, exists)
				if err != nil {
					return err
				}
				if lacks {
					continue
				}
			}
		}
		ok, err := exists(ctx, x, o)
		if err != nil {
			return fmt.Errorf("look up %s: %w", describe(o), err)
		}
		if ok {
			continue
		}
		if _, err := x.ExecContext(ctx, o.SQL); err != nil {
			// Another instance making the same objects at this moment made
			// this one first (MySQL: 1061 duplicate key name; PostgreSQL: a
			// unique violation in its catalog): go on to the rest, which
			// may be this call's to make (a later column of a table made
			// here).
			if again, e := exists(ctx, x, o); e == nil && again {
				continue
			}
			if o.Kind == store.KindIndex && skip != nil && skip(o.Name.String(), err) {
				continue
			}
			return fmt.Errorf("create %s: %w", describe(o), err)
		}
		for _, q := range o.After {
			// An index it replaces is not there when no earlier object made
			// it (the table was made here): MySQL has no DROP INDEX IF
			// EXISTS.
			if _, err := dropIfThere(ctx, x, o, q, exists); err != nil {
				return fmt.Errorf("create %s: %w", describe(o), err)
			}
		}
		if o.Kind == store.KindTable {
			made[o.Name.String()] = true
		}
	}
	return nil
}

// dropIfThere runs q, one of o's After statements, unless it drops an index
// (on o's table) that exists does not find; ran reports whether it ran.
func dropIfThere(ctx context.Context, x store.Execer, o store.Object, q string, exists Catalog) (ran bool, err error) {
	if m := dropIndexRE.FindStringSubmatch(q); m != nil {
		name := m[1]
		if i := strings.LastIndex(name, "."); i >= 0 {
			name = name[i+1:]
		}
		old := store.Object{Kind: store.KindIndex, Name: ident.Table{Name: ident.Name(strings.Trim(name, "\"`"))}, On: o.On}
		there, err := exists(ctx, x, old)
		if err != nil {
			return false, fmt.Errorf("look up %s: %w", describe(old), err)
		}
		if !there {
			return false, nil
		}
	}
	_, err = x.ExecContext(ctx, q)
	return err == nil, err
}

// lacksOptional reports whether the index o is on an optional column of objs
// that its table lacks.
func lacksOptional(ctx context.Context, x store.Execer, o store.Object, objs []store.Object, exists Catalog) (bool, error) {
	cols := o.SQL
	if i := strings.Index(cols, "("); i >= 0 {
		cols = cols[i:]
	}
	for _, c := range objs {
		if c.Kind != store.KindColumn || !c.Optional || c.Name != o.On ||
			!regexp.MustCompile(`\b`+regexp.QuoteMeta(c.Column)+`\b`).MatchString(cols) {
			continue
		}
		ok, err := exists(ctx, x, c)
		if err != nil {
			return false, fmt.Errorf("look up %s: %w", describe(c), err)
		}
		if !ok {
			return true, nil
		}
	}
	return false, nil
}

// anyIndex reports whether one of the indexes names (on table on) exists.
func anyIndex(ctx context.Context, x store.Execer, on ident.Table, names []ident.Table, exists Catalog) (bool, error) {
	for _, n := range names {
		o := store.Object{Kind: store.KindIndex, Name: n, On: on}
		ok, err := exists(ctx, x, o)
		if err != nil {
			return false, fmt.Errorf("look up %s: %w", describe(o), err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// CheckSchema returns store.ErrSchemaOutdated, naming the migration to run,
// for the first of objs (tables, columns, checked steps) that exists says is
// missing; indexes are not required. Nothing is checked while the first table of objs
// (the one the others hang on) does not exist: a missing table is not an
// outdated one. It reads catalogs only: no DDL, no lock but a reader's. A
// schema that seems outdated is looked at again for about a second (another
// instance may be making it) before the error.
func CheckSchema(ctx context.Context, x store.Execer, objs []store.Object, exists Catalog) error {
	return recheck(ctx, func() error { return checkSchema(ctx, x, objs, exists) })
}

// recheck runs check and, while it finds the schema outdated, again a few
// times for about a second. Another instance may be creating the same tables
// at this moment without a lock (a database without Schema.Lock, or an
// earlier release): the one that made a table adds the later migrations'
// columns to it right after (CreateMissing), and the others see the table
// before them.
func recheck(ctx context.Context, check func() error) error {
	err := check()
	for i := 0; i < outdatedRechecks && errors.Is(err, store.ErrSchemaOutdated); i++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(outdatedRecheckEvery):
		}
		err = check()
	}
	return err
}

// How often and how long CheckSchema looks again at a schema that seems
// outdated.
const (
	outdatedRechecks     = 4
	outdatedRecheckEvery = 250 * time.Millisecond
)

func checkSchema(ctx context.Context, x store.Execer, objs []store.Object, exists Catalog) error {
	first := true
	for _, o := range objs {
		if o.Kind == store.KindIndex || (o.Kind == store.KindStep && o.Check == "") || o.Optional {
			continue
		}
		ok, err := exists(ctx, x, o)
		if err != nil {
			return fmt.Errorf("look up %s: %w", describe(o), err)
		}
		if first && o.Kind == store.KindTable {
			first = false
			if !ok {
				return nil
			}
			continue
		}
		first = false
		if !ok {
			return fmt.Errorf("%w: %s is missing: run migration %s (migrations.Migrate applies it to the default tables)",
				store.ErrSchemaOutdated, describe(o), o.Migration())
		}
	}
	return nil
}

// describe names what o makes, for messages.
func describe(o store.Object) string {
	switch o.Kind {
	case store.KindIndex:
		return "index " + o.Name.String()
	case store.KindColumn:
		return "column " + o.Column + " of " + o.Name.String()
	case store.KindStep:
		return "the rows of " + o.Name.String()
	}
	return "table " + o.Name.String()
}

// Schema is one database's migrations and catalog: what Herald creates itself
// and checks at start for one outbox or inbox table, from every migration of
// the set (Outbox-, Relay- and InboxObjects).
type Schema struct {
	FS     fs.FS
	Quote  func(ident.Table) string
	Exists Catalog
	// ExistsAll, when set, answers what Exists answers for each of objs (no
	// step among them) in one statement: a creation or check then reads the
	// catalog once, not once per object (a relay's start, run again for each
	// tenant of a fleet, made 11 lookups on PostgreSQL). Defaults to nil: Exists
	// per object.
	ExistsAll CatalogAll
	// Atomic says the database runs DDL in a transaction (PostgreSQL and
	// SQLite; not MySQL, whose DDL commits at once): each creation then runs
	// in one, a savepoint around each statement, so that a connection cut or
	// a process killed between a table and the column a later migration adds
	// to it leaves neither (the next start makes both), never a table that
	// is outdated until Migrate runs. Locks the creation takes (an index
	// build's SHARE lock on an existing table) are held to its commit, which
	// follows its last statement. Defaults to false.
	Atomic bool
	// Lock, when set, serializes the creations and checks of the schema of
	// the database of t (see Locker): each creation and each check runs
	// holding it, on the Execer it returns. A database whose DDL commits
	// statement by statement (MySQL) needs it: without it a check beside a
	// creation sees the tables half-made.
	Lock Locker
}

// Locker takes the lock that serializes Herald's creations, checks and
// migrations of the schema of the database of t (its schema, or the
// connection's database when t has none; the zero table for the
// connection's): it waits for the lock, for a bounded time, and returns the
// Execer to run on while holding it (a connection of x's pool held for the
// duration, when x is a pool) and the function that releases it and gives
// the connection back. Everything done under the lock runs on that Execer,
// never on x, so a pool of one connection works. unlock is never nil when
// err is nil.
type Locker func(ctx context.Context, x store.Execer, t ident.Table) (locked store.Execer, unlock func(), err error)

// locked runs f holding the schema lock of the database of t (Locker), on
// the Execer the lock returns; with a nil lock, f runs on x.
func locked(ctx context.Context, lock Locker, x store.Execer, t ident.Table, f func(x store.Execer) error) error {
	if lock == nil {
		return f(x)
	}
	held, unlock, err := lock(ctx, x, t)
	if err != nil {
		return err
	}
	defer unlock()
	return f(held)
}

// create runs CreateMissing on x, holding s.Lock: when s is Atomic and x a
// DB, in one transaction. With check, it then checks those objects as check
// does: through the catalog read the creation made, when it made nothing.
func (s Schema) create(ctx context.Context, x store.Execer, t ident.Table, objs, check []store.Object, skip func(string, error) bool) error {
	checked := false
	err := locked(ctx, s.Lock, x, t, func(x store.Execer) error {
		run := func(x store.Execer) error {
			cx, exists := s.catalog(ctx, x, append(slices.Clip(objs), check...))
			if err := CreateMissing(ctx, cx, objs, exists, skip); err != nil {
				return err
			}
			if w, ok := cx.(*writes); ok && !w.wrote && check != nil {
				checked = true
				return checkSchema(ctx, x, check, exists)
			}
			return nil
		}
		db, ok := x.(store.DB)
		if !s.Atomic || !ok {
			return run(x)
		}
		// First outside a transaction, writing nothing: where nothing is
		// missing (every start but the first) the creation and its check
		// are one catalog read, with no BEGIN and COMMIT around it.
		if err := run(readOnly{x}); !errors.Is(err, errWouldWrite) {
			return err
		}
		checked = false
		return sqlkit.InTx(ctx, db, nil, func(tx store.Execer) error { return run(savepoints{tx}) })
	})
	switch {
	case check == nil || (err != nil && !errors.Is(err, store.ErrSchemaOutdated)):
		return err
	case checked && err == nil:
		return nil
	}
	// Made something, or outdated at the first look: look again (check).
	return s.check(ctx, x, t, check)
}

// check runs CheckSchema on x, each look holding s.Lock (released between
// the looks again).
func (s Schema) check(ctx context.Context, x store.Execer, t ident.Table, objs []store.Object) error {
	return recheck(ctx, func() error {
		return locked(ctx, s.Lock, x, t, func(x store.Execer) error {
			x, exists := s.catalog(ctx, x, objs)
			return checkSchema(ctx, x, objs, exists)
		})
	})
}

// catalog returns the Catalog a creation or check of objs looks up through,
// and the Execer it runs on. With ExistsAll, the tables, indexes and columns
// of objs (and the indexes they replace) are read in one statement first, and
// answered from that read until a statement runs on the returned Execer (a
// creation changes the answers): then, as without ExistsAll, or when that read
// fails (the lookups per object say which object's), through Exists per
// object. A read of the catalog made ahead (Prefetch, in ctx), younger than
// PrefetchAge, that found every object of look present stands for
// ExistsAll's.
func (s Schema) catalog(ctx context.Context, x store.Execer, objs []store.Object) (store.Execer, Catalog) {
	if s.ExistsAll == nil {
		return x, s.Exists
	}
	look := Lookups(objs)
	if len(look) == 0 {
		return x, s.Exists
	}
	read := prefetchedFrom(ctx).allPresent(look)
	if read == nil {
		found, err := s.ExistsAll(ctx, x, look)
		if err != nil || len(found) != len(look) {
			return x, s.Exists
		}
		read = make(map[lookup]bool, len(look))
		for i, o := range look {
			read[lookupOf(o)] = found[i]
		}
	}
	w := &writes{Execer: x}
	return w, func(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
		if ok, was := read[lookupOf(o)]; was && !w.wrote {
			return ok, nil
		}
		return s.Exists(ctx, x, o)
	}
}

// Lookups are the objects a creation or check of objs reads in the catalog
// in one statement (Schema.ExistsAll, Prefetch): objs but the steps, with
// the indexes they replace.
func Lookups(objs []store.Object) []store.Object {
	var look []store.Object
	for _, o := range objs {
		if o.Kind == store.KindStep {
			continue
		}
		look = append(look, o)
		for _, d := range o.Drops {
			look = append(look, store.Object{Kind: store.KindIndex, Name: d, On: o.On})
		}
	}
	return look
}

// RelayLookups are the objects CreateRelay with p (Check) reads in the
// catalog (Lookups): what a relay's start looks up.
func (s Schema) RelayLookups(t ident.Table, p store.RelayCreateParams) ([]store.Object, error) {
	objs, check, err := s.relayCreation(t, p)
	if err != nil {
		return nil, err
	}
	if !p.Check {
		check = nil
	}
	return Lookups(append(objs, check...)), nil
}

// Prefetched is a read of the catalog made ahead for many outboxes in one
// statement (a fleet's, at its probe of a shared pool's tenants: see
// WithPrefetched): what each object found there.
type Prefetched struct {
	read map[lookup]bool
	at   time.Time    // when it was read
	hits atomic.Int64 // creations and checks it answered
}

// PrefetchAge is how long a Prefetched answers: a creation or check later
// than that reads the catalog itself.
const PrefetchAge = 5 * time.Second

// Prefetch makes a Prefetched of objs (the Lookups of many outboxes) and
// what found, ExistsAll's answer for them (store.Driver.ObjectsExist).
func Prefetch(objs []store.Object, found []bool) (*Prefetched, error) {
	if len(found) != len(objs) {
		return nil, fmt.Errorf("prefetch: %d answers for %d objects", len(found), len(objs))
	}
	p := &Prefetched{read: make(map[lookup]bool, len(objs)), at: time.Now()}
	for i, o := range objs {
		p.read[lookupOf(o)] = found[i]
	}
	return p, nil
}

// Hits is how many creations and checks p answered.
func (p *Prefetched) Hits() int64 { return p.hits.Load() }

// View returns p's read with a count of hits of its own (one run's).
func (p *Prefetched) View() *Prefetched { return &Prefetched{read: p.read, at: p.at} }

// WithPrefetched returns ctx carrying p: a creation or check run with it
// whose objects p found all present reads nothing itself; one whose objects
// p did not see, or found missing, reads the catalog as without it. It is
// a read made earlier, so a schema changed since is found out as after any
// start: by the statements that then fail.
func WithPrefetched(ctx context.Context, p *Prefetched) context.Context {
	return context.WithValue(ctx, prefetchedKey{}, p)
}

type prefetchedKey struct{}

func prefetchedFrom(ctx context.Context) *Prefetched {
	p, _ := ctx.Value(prefetchedKey{}).(*Prefetched)
	return p
}

// allPresent returns p's answers for look when p found every object of look
// present, nil otherwise (or when p is nil, or older than PrefetchAge).
func (p *Prefetched) allPresent(look []store.Object) map[lookup]bool {
	if p == nil || time.Since(p.at) > PrefetchAge {
		return nil
	}
	read := make(map[lookup]bool, len(look))
	for _, o := range look {
		k := lookupOf(o)
		if !p.read[k] {
			return nil
		}
		read[k] = true
	}
	p.hits.Add(1)
	return read
}

// lookup is what an object's lookup in the catalog depends on.
type lookup struct {
	kind     store.Kind
	name, on ident.Table
	column   string
}

func lookupOf(o store.Object) lookup {
	return lookup{kind: o.Kind, name: o.Name, on: o.On, column: o.Column}
}

// writes notes that a statement ran on its Execer.
type writes struct {
	store.Execer
	wrote bool
}

func (w *writes) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	w.wrote = true
	return w.Execer.ExecContext(ctx, q, args...)
}

// errWouldWrite is readOnly's refusal.
var errWouldWrite = errors.New("a creation to make")

// readOnly runs the queries of x and refuses its statements (errWouldWrite).
type readOnly struct{ x store.Execer }

func (r readOnly) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errWouldWrite
}

func (r readOnly) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return r.x.QueryContext(ctx, q, args...)
}

// savepoints runs each statement of x behind a savepoint, rolled back to when
// the statement fails: the transaction goes on (CreateMissing looks the
// object up again, or skips an index it may not make).
type savepoints struct{ x store.Execer }

func (s savepoints) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if _, err := s.x.ExecContext(ctx, `SAVEPOINT herald_create`); err != nil {
		return nil, err
	}
	res, err := s.x.ExecContext(ctx, q, args...)
	if err != nil {
		if _, e := s.x.ExecContext(ctx, `ROLLBACK TO SAVEPOINT herald_create`); e != nil {
			return nil, errors.Join(err, e)
		}
		return nil, err
	}
	_, err = s.x.ExecContext(ctx, `RELEASE SAVEPOINT herald_create`)
	return res, err
}

func (s savepoints) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.x.QueryContext(ctx, q, args...)
}

// CreateOutbox creates what the write path needs on the outbox t when missing.
func (s Schema) CreateOutbox(ctx context.Context, x store.Execer, t ident.Table) error {
	objs, err := OutboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.create(ctx, x, t, objs, nil, nil)
}

// CheckOutbox checks what the write path needs on the outbox t (CheckSchema).
func (s Schema) CheckOutbox(ctx context.Context, x store.Execer, t ident.Table) error {
	objs, err := OutboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.check(ctx, x, t, objs)
}

// CreateRelay creates the relay's additions to the outbox t that p's mode
// needs when missing; an index whose creation fails is left out when p.Skip
// says so.
func (s Schema) CreateRelay(ctx context.Context, x store.Execer, t ident.Table, p store.RelayCreateParams) error {
	objs, check, err := s.relayCreation(t, p)
	if err != nil {
		return err
	}
	if !p.Check {
		check = nil
	}
	return s.create(ctx, x, t, objs, check, p.Skip)
}

// relayCreation is what CreateRelay creates when missing, and what it checks
// with p.Check.
func (s Schema) relayCreation(t ident.Table, p store.RelayCreateParams) (objs, check []store.Object, err error) {
	out, rel, err := OutboxAndRelayObjects(s.FS, t, s.Quote, p.Ordered, p.Retention)
	if err != nil {
		return nil, nil, err
	}
	// The outbox's columns too, which CreateMissing only looks up: an index
	// of the relay's is not added to an outbox that lacks one.
	cols := slices.DeleteFunc(slices.Clone(out), func(o store.Object) bool { return o.Kind != store.KindColumn })
	return append(cols, rel...), relayChecked(t, out, rel), nil
}

// relayChecked is what CheckRelay checks: of the outbox t's objects out, those
// on t itself (not the writers' tables derived from it, on which a relay role
// may have no privilege), then the relay's additions rel.
func relayChecked(t ident.Table, out, rel []store.Object) []store.Object {
	objs := slices.DeleteFunc(slices.Clone(out), func(o store.Object) bool { return o.Name != t })
	return append(objs, rel...)
}

// CheckRelay checks what the relay uses: the outbox t itself (not the
// writers' tables derived from it, on which a relay role may have no
// privilege) and the relay's additions p's mode needs.
func (s Schema) CheckRelay(ctx context.Context, x store.Execer, t ident.Table, p store.RelayCheckParams) error {
	out, rel, err := OutboxAndRelayObjects(s.FS, t, s.Quote, p.Ordered, p.Retention)
	if err != nil {
		return err
	}
	return s.check(ctx, x, t, relayChecked(t, out, rel))
}

// CreateAdmin creates the admin's objects on the outbox t (AdminObjects: the
// audit table) when missing.
func (s Schema) CreateAdmin(ctx context.Context, x store.Execer, t ident.Table) error {
	objs, err := AdminObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.create(ctx, x, t, objs, nil, nil)
}

// AdminExists reports whether the admin's objects on the outbox t (the audit
// table) exist.
func (s Schema) AdminExists(ctx context.Context, x store.Execer, t ident.Table) (bool, error) {
	objs, err := AdminObjects(s.FS, t, s.Quote)
	if err != nil {
		return false, err
	}
	for _, o := range objs {
		if o.Kind != store.KindTable {
			continue
		}
		ok, err := s.Exists(ctx, x, o)
		if err != nil || !ok {
			return false, err
		}
	}
	return len(objs) > 0, nil
}

// CreateInbox creates the inbox t when missing.
func (s Schema) CreateInbox(ctx context.Context, x store.Execer, t ident.Table) error {
	objs, err := InboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.create(ctx, x, t, objs, nil, nil)
}

// CheckInbox checks the inbox t.
func (s Schema) CheckInbox(ctx context.Context, x store.Execer, t ident.Table) error {
	objs, err := InboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.check(ctx, x, t, objs)
}

// Lookup is a driver's lookup of one table, index or column (never a step)
// as an SQL boolean expression, its arguments appended to args (their count
// numbers the next placeholder).
type Lookup func(o store.Object, args []any) (expr string, out []any)

// All is the CatalogAll that looks objs up through lookup in one statement,
// each a column of its one row.
func All(lookup Lookup) CatalogAll {
	return func(ctx context.Context, x store.Execer, objs []store.Object) ([]bool, error) {
		cols := make([]string, len(objs))
		var args []any
		for i, o := range objs {
			if o.Kind == store.KindStep {
				return nil, fmt.Errorf("look up the step of %s with the others", o.Name)
			}
			cols[i], args = lookup(o, args)
		}
		out := make([]bool, len(objs))
		dest := make([]any, len(objs))
		for i := range out {
			dest[i] = &out[i]
		}
		if err := sqlkit.QueryRow(ctx, x, "SELECT "+strings.Join(cols, ", "), args, dest...); err != nil {
			return nil, err
		}
		return out, nil
	}
}
