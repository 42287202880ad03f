package mysql_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/store/storetest"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestConformance runs the conformance suite on MySQL/MariaDB.
func TestConformance(t *testing.T) { storetest.Run(t, testkit.MySQL) }
