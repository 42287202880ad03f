package sqlite_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/store/storetest"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestConformance runs the conformance suite on SQLite.
func TestConformance(t *testing.T) { storetest.Run(t, testkit.SQLite) }
