package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
)

// The example runs end to end as a newcomer would run it.
func TestExampleRuns(t *testing.T) {
	schema := pgtest.Name("herald_example_")
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", pgtest.DSN()); err == nil {
			_, _ = db.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`)
			_ = db.Close()
		}
	})
	if err := run(context.Background(), 4, "gochannel", schema); err != nil {
		t.Fatal(err)
	}
}
