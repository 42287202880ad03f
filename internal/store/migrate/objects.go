package migrate

import (
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// statements splits a migration file's content into statements: comment
// lines dropped, a statement ending with a line that ends in ";". Two kinds of
// comment are Herald's own (goose and golang-migrate read them as comments):
// a line starting "-- herald: " is a line of a statement only Herald runs
// (one whose effect plain SQL cannot make conditional: Herald looks it up
// first), and "-- herald:check <query>" is the query that tells whether the
// next statement's effect is there already (store.Object.Check).
func statements(file string) []statement {
	var (
		out   []statement
		cur   strings.Builder
		check string
	)
	for line := range strings.SplitSeq(file, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, heraldCheck):
			check = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(trimmed, heraldCheck)), ";")
			continue
		case strings.HasPrefix(trimmed, heraldLine):
			line = strings.TrimPrefix(trimmed, heraldLine)
			trimmed = strings.TrimSpace(line)
		case trimmed == "", strings.HasPrefix(trimmed, "--"):
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, statement{strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"), check})
			cur.Reset()
			check = ""
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, statement{s, check})
	}
	return out
}

// statement is one statement of a migration file, with its check.
type statement struct{ sql, check string }

const (
	heraldLine  = "-- herald: "
	heraldCheck = "-- herald:check "
)

// Render puts table t where a migration statement names the default table def
// (quoted with q's quote character): the table itself and the tables derived
// from it (def_leases) qualified as t is, the indexes and keys derived from it
// (def_*_idx, def_*_key) unqualified, as index names are. A name is the quote
// character, def, optionally "_" and more of [a-z_], and the quote character
// (the expression renderRE in the tests); a fleet renders every statement for
// each tenant, so it is scanned for by hand.
func Render(stmt, def string, t ident.Table, quote func(ident.Table) string) string {
	qc := quote(ident.Table{Name: "x"})[:1] // the quote character
	head := qc + def
	var b strings.Builder
	rest, replaced := stmt, false
	for {
		i := strings.Index(rest, head)
		if i < 0 {
			break
		}
		j := i + len(head)
		k := j
		for k < len(rest) && (rest[k] == '_' || 'a' <= rest[k] && rest[k] <= 'z') {
			k++
		}
		suffix := rest[j:k]
		if !strings.HasPrefix(rest[k:], qc) || suffix != "" && (suffix[0] != '_' || len(suffix) < 2) {
			b.WriteString(rest[:i+1])
			rest = rest[i+1:]
			continue
		}
		if !replaced {
			b.Grow(len(stmt) + 64)
			replaced = true
		}
		b.WriteString(rest[:i])
		switch {
		case suffix == "":
			b.WriteString(quote(t))
		case strings.HasSuffix(suffix, "_idx"), strings.HasSuffix(suffix, "_key"):
			b.WriteString(quote(ident.Table{Name: t.Derived(suffix).Name}))
		default:
			b.WriteString(quote(t.Derived(suffix)))
		}
		rest = rest[k+len(qc):]
	}
	if !replaced {
		return stmt
	}
	b.WriteString(rest)
	return b.String()
}

var (
	createdRE   = regexp.MustCompile(`(?is)^\s*CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)\s+(IF\s+NOT\s+EXISTS\s+)?([^\s(]+)(?:\s+ON\s+([^\s(]+))?`)
	dropIndexRE = regexp.MustCompile(`(?is)^\s*DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?([^\s;]+)(?:\s+ON\s+([^\s;]+))?`)
	columnRE    = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\S+)\s+ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(\S+)`)
	virtualRE   = regexp.MustCompile(`(?is)\bAS\s*\(.*\)\s*VIRTUAL\b`)
	stepRE      = regexp.MustCompile(`(?is)^\s*(?:INSERT\s+(?:IGNORE\s+)?INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+([^\s(]+)`)
)

// parsed is a migration statement as Objects reads it, before rendering: what
// it makes and the names it gives, as the file writes them.
type parsed struct {
	statement
	created, column, dropIndex, step []string // the expressions' submatches (nil: no match)
	optional                         bool     // a virtual column
}

// parsedFiles are the migration files' statements parsed, by the file's
// content: the same for every table they are rendered for.
var parsedFiles sync.Map // content -> []parsed

// parse reads file from fsys and parses its statements (statements), once
// per content.
func parse(fsys fs.FS, file string) ([]parsed, error) {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	if ps, ok := parsedFiles.Load(string(b)); ok {
		return ps.([]parsed), nil
	}
	stmts := statements(string(b))
	ps := make([]parsed, len(stmts))
	for i, s := range stmts {
		ps[i] = parsed{statement: s, created: createdRE.FindStringSubmatch(s.sql), column: columnRE.FindStringSubmatch(s.sql),
			dropIndex: dropIndexRE.FindStringSubmatch(s.sql), step: stepRE.FindStringSubmatch(s.sql), optional: virtualRE.MatchString(s.sql)}
	}
	parsedFiles.Store(string(b), ps)
	return ps, nil
}

// Objects renders the statements of migration file for table t and says what
// each makes: the names in the file that are def or derived from it (def_*)
// become t's (Render); with def "" nothing is rendered.
func Objects(fsys fs.FS, file, def string, t ident.Table, quote func(ident.Table) string) ([]store.Object, error) {
	stmts, err := parse(fsys, file)
	if err != nil {
		return nil, err
	}
	render := func(s string) string {
		if def == "" {
			return s
		}
		return Render(s, def, t, quote)
	}
	name := func(quoted string) ident.Table {
		n := strings.Trim(quoted, "\"`")
		if def == "" || !derives(n, def) {
			return ident.Table{Name: ident.Name(n)}
		}
		return t.Derived(strings.TrimPrefix(n, def))
	}
	out := make([]store.Object, 0, len(stmts))
	for _, s := range stmts {
		o := store.Object{File: file, SQL: render(s.sql)}
		if m := s.created; m != nil {
			o.Kind, o.Name = store.KindTable, name(m[4])
			if strings.EqualFold(m[2], "INDEX") {
				o.Kind, o.On = store.KindIndex, name(m[5])
			}
		} else if m := s.column; m != nil {
			o.Kind, o.Name, o.Column = store.KindColumn, name(m[1]), strings.Trim(m[2], "\"`")
			o.Optional = s.optional
		} else if m := s.dropIndex; m != nil && m[2] != "" && (len(out) == 0 || out[len(out)-1].Kind != store.KindIndex) {
			// An index dropped alone (MySQL's DROP INDEX ... ON): a step
			// that drops it where it is there; what the migrations make
			// leaves it out (SchemaObjects).
			o.Kind, o.On, o.Drops = store.KindStep, name(m[2]), []ident.Table{name(m[1])}
		} else if len(out) > 0 && s.check == "" {
			last := &out[len(out)-1]
			last.After = append(last.After, o.SQL)
			if m := s.dropIndex; m != nil && last.Kind == store.KindIndex {
				last.Replaces = true
				last.Drops = append(last.Drops, name(m[1]))
			}
			continue
		} else {
			o.Kind, o.Check = store.KindStep, render(s.check)
			if m := s.step; m != nil {
				o.Name = name(m[1])
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// derives reports whether name is def or a name derived from it (def_*).
func derives(name, def string) bool {
	return name == def || strings.HasPrefix(name, def+"_")
}

// SchemaObjects returns the objects of every migration in fsys, in version
// order, that are on the default table def or on a table derived from it,
// rendered for t: the one definition of what Herald creates itself and checks
// at start, so that a migration added later is covered with no code change.
func SchemaObjects(fsys fs.FS, def string, t ident.Table, quote func(ident.Table) string) ([]store.Object, error) {
	migs, err := listed(fsys)
	if err != nil {
		return nil, err
	}
	var out []store.Object
	for _, m := range migs {
		objs, err := Objects(fsys, m.Up, def, t, quote)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			for _, d := range o.Drops { // an index a later migration replaced
				out = slices.DeleteFunc(out, func(p store.Object) bool { return p.Kind == store.KindIndex && p.Name == d })
			}
			if o.Kind == store.KindIndex {
				if on := o.On.Name; on != "" && derivesTable(o.On, t) {
					out = append(out, o)
				}
				continue
			}
			if derivesTable(o.Name, t) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// DroppedAfter returns the indexes that the migrations in fsys after the up
// file up replace (drop), as their files name them.
func DroppedAfter(fsys fs.FS, up string) (map[ident.Table]bool, error) {
	migs, err := Migrations(fsys)
	if err != nil {
		return nil, err
	}
	out := map[ident.Table]bool{}
	after := false
	for _, m := range migs {
		if !after {
			after = m.Up == up
			continue
		}
		objs, err := Objects(fsys, m.Up, "", ident.Table{}, nil)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			for _, d := range o.Drops {
				out[d] = true
			}
		}
	}
	return out, nil
}

// derivesTable reports whether n (rendered) is t or a table derived from it.
func derivesTable(n, t ident.Table) bool {
	return n.Schema == t.Schema && derives(string(n.Name), string(t.Name))
}

// relayNeeds reports whether o is one of the relay's additions to the outbox
// (by its name: the lease and instance tables and what is on them, the claim,
// dead and retention indexes) and whether a relay in this mode needs it: the
// lease and instance tables and the claim indexes in ordered mode, the
// processed index with retention, the dead index always.
func relayNeeds(o store.Object, ordered, retention bool) (relay, need bool) {
	name := string(o.Name.Name)
	switch {
	case strings.HasSuffix(name, "_leases"), strings.HasSuffix(name, "_relays"), strings.HasSuffix(name, "_ordered_idx"), strings.HasSuffix(name, "_aggregate_idx"),
		strings.HasSuffix(name, "_blockers_idx"): // the aggregate index of the events that can hold theirs back (SQLite, MySQL)
		return true, ordered
	case strings.HasSuffix(name, "_claims"): // SQLite: the unordered claims' table (a relay may change modes)
		return true, true
	case strings.HasSuffix(name, "_processed_idx"):
		return true, retention
	case strings.HasSuffix(name, "_dead_idx"):
		return true, true
	}
	return false, false
}

// OutboxObjects are the objects of the migrations in fsys on the outbox t and
// the tables derived from it that are not the relay's: what the write path
// needs (in PostgreSQL's partitioned set, the partitioned table).
func OutboxObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string) ([]store.Object, error) {
	return filterObjects(fsys, store.DefaultOutbox, t, quote, isOutbox)
}

// isOutbox reports whether o is the outbox's own (the writers'): neither the
// relay's nor the admin's.
func isOutbox(o store.Object) bool {
	relay, _ := relayNeeds(o, false, false)
	return !relay && !isAdmin(o)
}

// isAdmin reports whether o is the admin's (by its name: the audit table of
// the operators' bulk actions and what is on it), which neither the write
// path nor the relay needs: the admin tools create it at their first write.
func isAdmin(o store.Object) bool {
	name := string(o.Name.Name)
	if o.Kind == store.KindIndex {
		name = string(o.On.Name)
	}
	return strings.HasSuffix(name, "_audit")
}

// AdminObjects are the admin's objects on the outbox t in the migrations in
// fsys: the audit table.
func AdminObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string) ([]store.Object, error) {
	return filterObjects(fsys, store.DefaultOutbox, t, quote, isAdmin)
}

// RelayObjects are the relay's additions to the outbox t in the migrations in
// fsys that a relay in this mode needs.
func RelayObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string, ordered, retention bool) ([]store.Object, error) {
	return filterObjects(fsys, store.DefaultOutbox, t, quote, func(o store.Object) bool { return relayNeeded(o, ordered, retention) })
}

// relayNeeded reports whether o is the relay's and a relay in this mode
// needs it.
func relayNeeded(o store.Object, ordered, retention bool) bool {
	relay, need := relayNeeds(o, ordered, retention)
	return relay && need
}

// OutboxAndRelayObjects are OutboxObjects and RelayObjects from one
// rendering of the migrations: a relay's start needs both (a fleet starts a
// relay per tenant). A driver's set (fsys behind a pointer, as listed) is
// rendered once for a table and mode and kept a while (rendered): a fleet's
// tenant relay asks at the fleet's prefetch, at its start and at its schema
// check. The caller changes neither slice nor their objects.
func OutboxAndRelayObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string, ordered, retention bool) (out, rel []store.Object, err error) {
	if reflect.TypeOf(fsys).Kind() != reflect.Pointer {
		return outboxAndRelayObjects(fsys, t, quote, ordered, retention)
	}
	k := renderKey{fsys: fsys, t: t, ordered: ordered, retention: retention}
	if r, ok := rendered.get(k); ok {
		return r.out, r.rel, nil
	}
	if out, rel, err = outboxAndRelayObjects(fsys, t, quote, ordered, retention); err != nil {
		return nil, nil, err
	}
	out, rel = slices.Clip(out), slices.Clip(rel) // a caller's append copies
	rendered.put(k, renderedObjects{out, rel})
	return out, rel, nil
}

// renderedMax bounds each of rendered's two generations: a fleet's probes
// render for the tenants they find due (100 a probe), whose relays start
// when places are free, up to a few hundred tenants later in a burn-down of
// 1,000 (a tenant's objects are about 8 kB).
const renderedMax = 512

// rendered are OutboxAndRelayObjects' answers for drivers' sets, by set
// (whose quoting is its driver's one), table and mode: the newer generation
// (cur) and the one before (old), dropped when cur is full; a hit in old
// moves to cur, so that what was rendered last, or used, stays.
var rendered renderCache

type renderCache struct {
	sync.Mutex
	cur, old map[renderKey]renderedObjects
}

func (c *renderCache) get(k renderKey) (renderedObjects, bool) {
	c.Lock()
	defer c.Unlock()
	if r, ok := c.cur[k]; ok {
		return r, true
	}
	r, ok := c.old[k]
	if ok {
		c.add(k, r)
	}
	return r, ok
}

func (c *renderCache) put(k renderKey, r renderedObjects) {
	c.Lock()
	defer c.Unlock()
	c.add(k, r)
}

func (c *renderCache) add(k renderKey, r renderedObjects) {
	if c.cur == nil || len(c.cur) >= renderedMax {
		c.old, c.cur = c.cur, make(map[renderKey]renderedObjects, renderedMax)
	}
	c.cur[k] = r
}

type renderKey struct {
	fsys               fs.FS
	t                  ident.Table
	ordered, retention bool
}

type renderedObjects struct{ out, rel []store.Object }

func outboxAndRelayObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string, ordered, retention bool) (out, rel []store.Object, err error) {
	objs, err := SchemaObjects(fsys, store.DefaultOutbox, t, quote)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range objs {
		switch {
		case isOutbox(o):
			out = append(out, o)
		case relayNeeded(o, ordered, retention):
			rel = append(rel, o)
		}
	}
	return out, rel, nil
}

// InboxObjects are the objects of the migrations in fsys on the inbox t.
func InboxObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string) ([]store.Object, error) {
	return filterObjects(fsys, store.DefaultInbox, t, quote, func(store.Object) bool { return true })
}

func filterObjects(fsys fs.FS, def string, t ident.Table, quote func(ident.Table) string, keep func(store.Object) bool) ([]store.Object, error) {
	objs, err := SchemaObjects(fsys, def, t, quote)
	if err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out, nil
}
