package main

import (
	"context"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
)

func TestExampleRuns(t *testing.T) {
	schema := pgtest.Name("herald_signup_")
	pgtest.DropSchemaAtCleanup(t, schema)
	if err := run(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
}
