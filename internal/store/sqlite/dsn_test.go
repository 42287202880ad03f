package sqlite_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/store/sqlite"
)

// WithSettings keeps a DSN's own parameters, in order, and replaces those
// that set the busy timeout, the journal mode or the transaction lock, in
// either driver's syntax.
func TestWithSettings(t *testing.T) {
	for _, c := range []struct {
		dsn   string
		mattn bool
		want  string
	}{
		{"app.db", false, "app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
		{"app.db", true, "app.db?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"},
		{"file:/d/app.db?cache=private&_txlock=deferred&_pragma=BUSY_TIMEOUT(1)&_pragma=foreign_keys(1)&_pragma=journal_mode%28delete%29", false,
			"file:/d/app.db?cache=private&_pragma=foreign_keys(1)&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
		{"file:/d/app.db?_timeout=1&_journal=DELETE&_fk=1&_busy_timeout=2&_journal_mode=delete", true,
			"file:/d/app.db?_fk=1&_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"},
	} {
		if got := sqlite.WithSettings(c.dsn, c.mattn); got != c.want {
			t.Errorf("WithSettings(%q, %v) = %q, want %q", c.dsn, c.mattn, got, c.want)
		}
	}
	if got := sqlite.DSN("/d/app.db"); got != "file:/d/app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate" {
		t.Errorf("DSN = %q", got)
	}
	for dsn, want := range map[string]string{"app.db": "", "app.db?_txlock=IMMEDIATE": "immediate", "app.db?_txlock=exclusive&_txlock=deferred": "exclusive"} {
		if got := sqlite.TxLock(dsn); got != want {
			t.Errorf("TxLock(%q) = %q, want %q", dsn, got, want)
		}
	}
	for dsn, want := range map[string]bool{":memory:": true, "file::memory:?cache=shared": true, "file:x?mode=memory": true, "": true, "app.db": false, "file:app.db?mode=rwc": false} {
		if got := sqlite.MemoryDSN(dsn); got != want {
			t.Errorf("MemoryDSN(%q) = %v, want %v", dsn, got, want)
		}
	}
}
