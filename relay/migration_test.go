package relay_test

import (
	"os"
	"strings"
	"testing"

	"github.com/heraldgo/herald/relay"
)

func TestMigrationFileMatchesSchema(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("migrations/0001_relay.sql")
	if err != nil {
		t.Fatal(err)
	}
	ddl, err := relay.SchemaSQL("outbox_messages")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(file), ddl) {
		t.Fatalf("migrations/0001_relay.sql does not end with SchemaSQL(\"outbox_messages\"):\n%s", ddl)
	}
	if _, err := relay.SchemaSQL("bad name"); err == nil {
		t.Fatal("SchemaSQL accepted a bad name")
	}
}
