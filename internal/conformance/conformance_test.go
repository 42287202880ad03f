package conformance_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/conformance"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs the conformance suite on every database the tests run
// against (HERALD_TEST_DIALECTS picks some), in parallel.
func TestConformance(t *testing.T) { testkit.ForEach(t, conformance.Run) }
