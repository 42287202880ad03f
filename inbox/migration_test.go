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
	if !strings.HasSuffix(string(file), inbox.SchemaSQL("inbox_messages")) {
		t.Fatalf("migrations/0001_inbox_messages.sql does not end with SchemaSQL(\"inbox_messages\")")
	}
}
