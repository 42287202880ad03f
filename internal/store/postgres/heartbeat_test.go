package postgres_test

import (
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/postgres"
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
