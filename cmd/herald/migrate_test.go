package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/relay"
)

// migrate status on a schema Herald created itself (the outbox hook, a relay
// in each mode that adds objects, the inbox), which records nothing in
// herald_schema_migrations: every migration is present, none pending, and the
// status says the schema is up to date; migrate up then records them. A
// schema Herald created only in part (the outbox hook alone; then a relay in
// its default mode, which needs no lease table) has the rest pending, with
// what a migration that is partly there lacks. The audit table is made by the
// operators' first group action (herald dead requeue --group).
func TestMigrateStatusHeraldCreated(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		ctx := context.Background()
		e := newEnv(t, d, true) // the outbox hook made the outbox
		out := e.must(exitOK, "migrate", "status")
		if !strings.Contains(out, "pending") || strings.Contains(out, "up to date") ||
			!strings.Contains(strings.Join(strings.Fields(out), " "), "0003 inbox_messages pending") {
			t.Fatalf("migrate status, the outbox hook's tables alone:\n%s", out)
		}

		pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pub.Close() })
		// As examples/orders: a relay in its default mode and the inbox. The
		// ordered mode's objects are not there yet: 0002 is pending.
		r, err := relay.New(e.db, pub, relay.Config{})
		testkit.Must(t, err)
		testkit.Must(t, r.Setup(ctx))
		_, err = inbox.New(e.db, inbox.Config{})
		testkit.Must(t, err)
		out = e.must(exitOK, "migrate", "status")
		flat := strings.Join(strings.Fields(out), " ")
		if !strings.Contains(flat, "0001 outbox_messages present") || !strings.Contains(flat, "0003 inbox_messages present") ||
			!strings.Contains(flat, "0002 relay pending") ||
			!strings.Contains(out, "to apply: herald migrate up (Herald created the tables it has needed so far") {
			t.Fatalf("migrate status, the default relay's tables:\n%s", out)
		}

		r, err = relay.New(e.db, pub, relay.Config{Ordered: true, Retention: time.Hour})
		testkit.Must(t, err)
		testkit.Must(t, r.Setup(ctx))
		// The audit table: made by the operators' first group action (one
		// that finds nothing).
		if flat := strings.Join(strings.Fields(e.must(exitOK, "migrate", "status")), " "); !strings.Contains(flat, "admin_audit pending") {
			t.Fatalf("migrate status before any group action:\n%s", flat)
		}
		key := admin.DeadGroupKey{Type: "none", Until: time.Now()}.String()
		e.must(exitOK, "dead", "requeue", "--group", key, "--by", "test")

		fsys, err := migrations.ForDatabase(d.Name)
		testkit.Must(t, err)
		migs, err := migrations.List(fsys)
		testkit.Must(t, err)
		out = e.must(exitOK, "migrate", "status")
		if strings.Contains(out, "pending") || strings.Count(out, "present (created by Herald, not recorded)") != len(migs) ||
			!strings.Contains(out, "\nup to date: Herald created its tables itself") {
			t.Fatalf("migrate status, Herald's own tables:\n%s", out)
		}
		if out := e.must(exitOK, "migrate", "up"); strings.Count(out, "applied ") != len(migs) {
			t.Fatalf("migrate up over Herald's own tables:\n%s", out)
		}
		if out := e.must(exitOK, "migrate", "status"); !strings.HasSuffix(out, "every migration is applied\n") {
			t.Fatalf("migrate status, recorded:\n%s", out)
		}
	})
}
