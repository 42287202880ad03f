package postgres_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store/storetest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs the conformance suite on PostgreSQL.
func TestConformance(t *testing.T) { storetest.Run(t, testkit.Postgres) }
