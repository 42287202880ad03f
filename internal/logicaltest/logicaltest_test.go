package logicaltest_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/logicaltest"
)

func TestMain(m *testing.M) { logicaltest.Main(m) }

// TestLogicalServer checks that the server decodes transactional logical
// messages and that each test has a database of its own.
func TestLogicalServer(t *testing.T) {
	db, _ := logicaltest.Open(t, nil)
	var level string
	if err := db.Raw(`SHOW wal_level`).Scan(&level).Error; err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
	if err := db.Exec(`SELECT pg_create_logical_replication_slot('t', 'test_decoding')`).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(`SELECT pg_logical_emit_message(true, 'herald', 'hello')`).Error; err != nil {
		t.Fatal(err)
	}
	var data []string
	if err := db.Raw(`SELECT data FROM pg_logical_slot_get_changes('t', NULL, NULL)`).Scan(&data).Error; err != nil {
		t.Fatal(err)
	}
	if len(data) != 3 || data[1] != "message: transactional: 1 prefix: herald, sz: 5 content:hello" {
		t.Fatalf("changes = %q", data)
	}
	other, _ := logicaltest.Open(t, nil)
	var n int
	if err := other.Raw(`SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d slots in a fresh database", n)
	}
}
