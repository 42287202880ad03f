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
	if !strings.HasSuffix(string(file), relay.SchemaSQL("outbox_messages")) {
		t.Fatalf("migrations/0001_relay.sql does not end with SchemaSQL(\"outbox_messages\"):\n%s", relay.SchemaSQL("outbox_messages"))
	}
}
