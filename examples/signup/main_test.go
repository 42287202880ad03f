package main

import (
	"context"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
)

// With nothing set, the example runs on SQLite, needing no server.
func TestExampleRunsOnSQLite(t *testing.T) {
	if err := run(context.Background(), "", "herald_signup"); err != nil {
		t.Fatal(err)
	}
}

// With DATABASE_URL set to a PostgreSQL server, in a schema of its own.
func TestExampleRunsOnPostgres(t *testing.T) {
	schema := pgtest.Name("herald_signup_")
	pgtest.DropSchemaAtCleanup(t, schema)
	if err := run(context.Background(), pgtest.DSN(), schema); err != nil {
		t.Fatal(err)
	}
}
