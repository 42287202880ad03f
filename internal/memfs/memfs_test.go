package memfs_test

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/heraldgo/herald/internal/memfs"
)

// TestFS checks the FS as testing/fstest checks a file system: opening,
// reading, listing, globbing, walking.
func TestFS(t *testing.T) {
	f := memfs.FS{"0001_outbox.up.sql": []byte("CREATE TABLE x;"), "0001_outbox.down.sql": []byte("DROP TABLE x;"), "empty.sql": nil}
	if err := fstest.TestFS(f, "0001_outbox.up.sql", "0001_outbox.down.sql", "empty.sql"); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(f, "*.up.sql")
	if err != nil || len(names) != 1 || names[0] != "0001_outbox.up.sql" {
		t.Fatalf("Glob = %v, %v", names, err)
	}
	if _, err := f.Open("missing.sql"); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
	if _, err := fs.ReadFile(f, "dir/0001_outbox.up.sql"); err == nil {
		t.Fatal("ReadFile below the root succeeded")
	}
}
