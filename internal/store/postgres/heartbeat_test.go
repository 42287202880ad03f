package postgres_test

import (
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/postgres"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// A beat turns synchronous_commit off for its own transaction only (its
// commit does not wait for the WAL flush): it upserts the instance's row,
// and the session it ran on, the pool's, keeps its setting.
func TestBeatKeepsSessionSettings(t *testing.T) {
	db := pgtest.SchemaDB(t)
	db.SetMaxOpenConns(1) // the beats and the SHOW on one session
	ctx := t.Context()
	hb := postgres.Driver{}.Heartbeats(ident.MustTable(store.DefaultOutbox))
	if err := hb.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	for range 2 { // an insert, then an update
		if err := hb.Beat(ctx, db, "i1"); err != nil {
			t.Fatalf("Beat: %v", err)
		}
	}
	var setting string
	if err := db.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Fatalf("synchronous_commit after a beat = %q, want the session's own, on", setting)
	}
	is, err := hb.Instances(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(is) != 1 || is[0].Instance != "i1" || is[0].Ago > time.Minute {
		t.Fatalf("Instances = %+v, want i1 seen just now", is)
	}
}

// The probe of many outboxes in one statement (sqlkit.Nexts), whose text
// names them and so is seldom the same twice, is not kept as a prepared
// statement on the session: pgx's cache would keep 512 of them, each
// holding megabytes of the server's memory.
func TestNextsKeepsNoStatement(t *testing.T) {
	db := pgtest.SchemaDB(t)
	db.SetMaxOpenConns(1) // the probe and the look at the session's statements on one session
	ctx := t.Context()
	var hbs []store.Heartbeats
	for _, name := range []string{"a_outbox", "b_outbox"} {
		tbl := ident.MustTable(name)
		if err := (postgres.Driver{}).Outbox(tbl).Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		hbs = append(hbs, postgres.Driver{}.Heartbeats(tbl))
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO a_outbox (id, type, topic, payload, occurred_at)
VALUES (gen_random_uuid(), 't', 't', '{}', now())`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := sqlkit.Nexts(ctx, db, hbs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !got[0].OK || got[0].Wait > 0 || got[1].OK {
			t.Fatalf("Nexts = %+v, want a_outbox due now and b_outbox empty", got)
		}
	}
	var kept int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements
WHERE statement LIKE '%available_at - now()%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 0 {
		t.Fatalf("the probe is kept as %d prepared statement(s) on the session", kept)
	}
}
