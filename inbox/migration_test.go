package inbox_test

import (
	"os"
	"strings"
	"testing"

	"github.com/heraldgo/herald/inbox"
)

func TestMigrationFileMatchesSchema(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("migrations/0001_inbox_messages.sql")
	if err != nil {
		t.Fatal(err)
	}
	ddl, err := inbox.SchemaSQL("inbox_messages")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(file), ddl) {
		t.Fatalf("migrations/0001_inbox_messages.sql does not end with SchemaSQL(\"inbox_messages\")")
	}
}
