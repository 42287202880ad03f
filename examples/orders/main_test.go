package main

import (
	"context"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
)

// The example runs end to end as a newcomer would run it.
func TestExampleRuns(t *testing.T) {
	schema := pgtest.Name("herald_example_")
	pgtest.DropSchemaAtCleanup(t, schema)
	if err := run(context.Background(), 4, "gochannel", schema); err != nil {
		t.Fatal(err)
	}
}
