package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Every driver's relay additions include the leases' generation column, an
// ALTER TABLE the self-creation runs when the column is missing.
func TestRelayObjectsAddTheGeneration(t *testing.T) {
	fsys := fstest.MapFS{
		"0002_relay.up.sql":              {Data: []byte("CREATE TABLE IF NOT EXISTS \"outbox_messages_leases\" (partition int);\n")},
		"0002_relay.down.sql":            {Data: []byte("DROP TABLE \"outbox_messages_leases\";\n")},
		"0005_lease_generation.up.sql":   {Data: []byte("-- c\nALTER TABLE \"outbox_messages_leases\" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0;\n")},
		"0005_lease_generation.down.sql": {Data: []byte("ALTER TABLE \"outbox_messages_leases\" DROP COLUMN generation;\n")},
	}
	objs, err := RelayObjects(fsys, ident.MustTable("app.events"), ident.Table.Quoted, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("objects = %+v", objs)
	}
	add := objs[1]
	if add.Column != "generation" || add.Name.String() != "app.events_leases" || add.Kind != store.KindColumn ||
		add.SQL != `ALTER TABLE "app"."events_leases" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0` {
		t.Fatalf("the column object = %+v", add)
	}
}

// renderRE is what Render scans for: the quote character, def, optionally
// "_" and more of [a-z_], and the quote character.
func renderRE(qc, def string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(qc+def) + `(_[a-z_]+)?` + regexp.QuoteMeta(qc))
}

// renderByRE is Render through renderRE, the reference Render's scan keeps to.
func renderByRE(stmt, def string, t ident.Table, quote func(ident.Table) string) string {
	qc := quote(ident.Table{Name: "x"})[:1]
	return renderRE(qc, def).ReplaceAllStringFunc(stmt, func(m string) string {
		suffix := strings.TrimSuffix(strings.TrimPrefix(m, qc+def), qc)
		switch {
		case suffix == "":
			return quote(t)
		case strings.HasSuffix(suffix, "_idx"), strings.HasSuffix(suffix, "_key"):
			return quote(ident.Table{Name: t.Derived(suffix).Name})
		default:
			return quote(t.Derived(suffix))
		}
	})
}

// Render renders every statement of every driver's migrations as the
// expression it scans for by hand does, for tables with and without a
// schema, and statements made to trip a scan.
func TestRenderAsTheExpression(t *testing.T) {
	backtick := func(t ident.Table) string {
		if t.Schema != "" {
			return "`" + string(t.Schema) + "`.`" + string(t.Name) + "`"
		}
		return "`" + string(t.Name) + "`"
	}
	stmts := []string{
		`CREATE INDEX "outbox_messages_pending_idx" ON "outbox_messages" (x)`,
		`"outbox_messages" "outbox_messages_" "outbox_messages_a" "outbox_messagesx" "outbox_messages_A" "outbox_messages_a_b_c"`,
		`"outbox_messages"outbox_messages" ""outbox_messages"" "outbox_messages_x_idx"x"outbox_messages_leases"`,
		`no name here`, ``, `"outbox_messages`, `outbox_messages"`, `"outbox_messages__"`, `"outbox_messages_1"`,
	}
	for _, dir := range []string{"../postgres/migrations", "../postgres/migrations/partitioned", "../mysql/migrations", "../sqlite/migrations"} {
		names, err := fs.Glob(os.DirFS(dir), "*.sql")
		if err != nil || len(names) == 0 {
			t.Fatalf("%s: %v (%d files)", dir, err, len(names))
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range statements(string(b)) {
				stmts = append(stmts, st.sql, st.check)
			}
		}
	}
	for _, table := range []string{"outbox_messages", "events", "app.events", "tenant_0042.outbox_messages"} {
		tb := ident.MustTable(table)
		for _, quote := range []func(ident.Table) string{ident.Table.Quoted, backtick} {
			for _, def := range []string{store.DefaultOutbox, store.DefaultInbox} {
				for _, st := range stmts {
					for _, s := range []string{st, strings.ReplaceAll(st, `"`, "`")} {
						if got, want := Render(s, def, tb, quote), renderByRE(s, def, tb, quote); got != want {
							t.Fatalf("Render(%q, %s, %s):\n got  %q\n want %q", s, def, table, got, want)
						}
					}
				}
			}
		}
	}
}

// ptrFS is a file system behind a pointer, as a driver's set is (fs.Sub of
// an embedded one): OutboxAndRelayObjects keeps its renderings.
type ptrFS struct{ fs.FS }

// OutboxAndRelayObjects, one rendering of the migrations, says what
// OutboxObjects and RelayObjects say, for every driver's migrations and
// every relay mode; asked again of a set behind a pointer (its answer kept),
// the same, whatever the caller appended to the first answer.
func TestOutboxAndRelayObjects(t *testing.T) {
	for _, dir := range []string{"../postgres/migrations", "../mysql/migrations", "../sqlite/migrations"} {
		for _, fsys := range []fs.FS{os.DirFS(dir), &ptrFS{os.DirFS(dir)}, &ptrFS{os.DirFS(dir)}} {
			for _, tbl := range []ident.Table{ident.MustTable("outbox_messages"), ident.MustTable("tenant_7.events")} {
				for _, mode := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					_, rel, err := OutboxAndRelayObjects(fsys, tbl, ident.Table.Quoted, mode[0], mode[1])
					if err != nil {
						t.Fatal(err)
					}
					mine := append(rel, store.Object{Name: ident.MustTable("mine")})
					out, rel, err := OutboxAndRelayObjects(fsys, tbl, ident.Table.Quoted, mode[0], mode[1])
					if err != nil {
						t.Fatal(err)
					}
					if _ = append(rel, store.Object{Name: ident.MustTable("theirs")}); mine[len(mine)-1].Name.Name != "mine" {
						t.Fatalf("%s (%T): two callers' appends to the kept answer share their room", dir, fsys)
					}
					wantOut, err := OutboxObjects(fsys, tbl, ident.Table.Quoted)
					if err != nil {
						t.Fatal(err)
					}
					wantRel, err := RelayObjects(fsys, tbl, ident.Table.Quoted, mode[0], mode[1])
					if err != nil {
						t.Fatal(err)
					}
					same := func(a, b []store.Object) bool { return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b)) }
					if len(out) == 0 || !same(out, wantOut) || !same(rel, wantRel) {
						t.Fatalf("%s (%T), %s, ordered and retention %v: OutboxAndRelayObjects = %d and %d objects, want OutboxObjects' %d and RelayObjects' %d",
							dir, fsys, tbl, mode, len(out), len(rel), len(wantOut), len(wantRel))
					}
				}
			}
		}
	}
}

// noExec fails every statement: a creation or check that needs none runs.
type noExec struct{}

func (noExec) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errors.New("a statement ran")
}

func (noExec) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errors.New("a query ran")
}

// A relay's start whose objects a prefetched read found all present reads
// nothing itself (Schema.ExistsAll is not called); one of another table, or
// another mode, or whose read found an object missing, reads the catalog.
func TestCreateRelayFromPrefetched(t *testing.T) {
	reads := 0
	s := Schema{FS: os.DirFS("../postgres/migrations"), Quote: ident.Table.Quoted,
		Exists: func(context.Context, store.Execer, store.Object) (bool, error) { reads++; return true, nil },
		ExistsAll: func(_ context.Context, _ store.Execer, objs []store.Object) ([]bool, error) {
			reads++
			return slices.Repeat([]bool{true}, len(objs)), nil
		}}
	tbl := ident.MustTable("tenant_7.outbox_messages")
	p := store.RelayCreateParams{Check: true}
	look, err := s.RelayLookups(tbl, p)
	if err != nil || len(look) == 0 {
		t.Fatalf("RelayLookups = %d objects, %v", len(look), err)
	}
	all := slices.Repeat([]bool{true}, len(look))
	read, err := Prefetch(look, all)
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithPrefetched(t.Context(), read)
	if err := s.CreateRelay(ctx, noExec{}, tbl, p); err != nil || reads != 0 || read.Hits() != 1 {
		t.Fatalf("prefetched, all present: CreateRelay = %v after %d reads of its own, %d hits; want nil, 0, 1", err, reads, read.Hits())
	}
	if err := s.CreateRelay(ctx, noExec{}, ident.MustTable("tenant_8.outbox_messages"), p); err != nil || reads != 1 {
		t.Fatalf("another table: CreateRelay = %v after %d reads; want nil after 1 of its own", err, reads)
	}
	if err := s.CreateRelay(ctx, noExec{}, tbl, store.RelayCreateParams{Check: true, Ordered: true}); err != nil || reads != 2 {
		t.Fatalf("ordered mode: CreateRelay = %v after %d reads; want nil after 2 of its own", err, reads)
	}
	all[len(all)-1] = false
	if read, err = Prefetch(look, all); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRelay(WithPrefetched(t.Context(), read), noExec{}, tbl, p); err != nil || reads != 3 || read.Hits() != 0 {
		t.Fatalf("prefetched, one missing: CreateRelay = %v after %d reads, %d hits; want nil after 3 of its own, 0 hits", err, reads, read.Hits())
	}
	all[len(all)-1] = true
	if read, err = Prefetch(look, all); err != nil {
		t.Fatal(err)
	}
	read.at = read.at.Add(-PrefetchAge - time.Second)
	if err := s.CreateRelay(WithPrefetched(t.Context(), read), noExec{}, tbl, p); err != nil || reads != 4 || read.Hits() != 0 {
		t.Fatalf("prefetched longer ago than PrefetchAge: CreateRelay = %v after %d reads, %d hits; want nil after 4 of its own, 0 hits", err, reads, read.Hits())
	}
	if _, err := Prefetch(look, all[1:]); err == nil {
		t.Fatal("Prefetch with fewer answers than objects: no error")
	}
}

// The cache of rendered objects keeps the last renderedMax tables and those
// of the generation before: a fleet's relay that starts some hundred tenants
// after its probe rendered its objects finds them, and a hit in the older
// generation stays through the next turn.
func TestRenderCacheGenerations(t *testing.T) {
	var c renderCache
	key := func(i int) renderKey { return renderKey{t: ident.Table{Name: ident.Name(fmt.Sprintf("t%d", i))}} }
	for i := range renderedMax + renderedMax/2 {
		c.put(key(i), renderedObjects{})
	}
	if _, ok := c.get(key(renderedMax - 1)); !ok {
		t.Fatal("the last table of the older generation was dropped")
	}
	if _, ok := c.get(key(0)); !ok {
		t.Fatal("the first table, one generation back, was dropped")
	}
	for i := range renderedMax {
		c.put(key(10000+i), renderedObjects{})
	}
	if _, ok := c.get(key(0)); !ok {
		t.Error("a table found in the older generation was dropped at the next turn")
	}
	if _, ok := c.get(key(1)); ok {
		t.Error("a table two generations back is still kept")
	}
}
