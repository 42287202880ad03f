package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
)

func TestExampleRuns(t *testing.T) {
	schema := pgtest.Name("herald_signup_")
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", pgtest.DSN()); err == nil {
			_, _ = db.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`)
			_ = db.Close()
		}
	})
	if err := run(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
}
