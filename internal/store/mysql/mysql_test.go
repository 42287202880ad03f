package mysql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// A MySQL DSN without clientFoundRows=true fails at db.Use: with it off, a Save
// that changes no column reports 0 rows, and its events would never be written.
func TestClientFoundRowsRequired(t *testing.T) {
	t.Parallel()
	dsn := strings.Replace(testkit.MySQL.NewDSN(t), "clientFoundRows=true", "clientFoundRows=false", 1)
	db := testkit.MySQL.Open(t, dsn, nil)
	if err := db.Use(outboxhook.New(outboxhook.Config{})); !errors.Is(err, drivers.ErrClientFoundRows) {
		t.Fatalf("db.Use = %v, want ErrClientFoundRows", err)
	}
}
