package sqlite

import (
	"fmt"
	"net/url"
	"strings"
)

// BusyTimeout is the busy timeout DSN sets, in milliseconds.
const BusyTimeout = 10000

// DSN is the DSN Herald recommends for the SQLite file at path, in the syntax
// of modernc.org/sqlite (gorm.io/driver/sqlite with DriverName "sqlite"; also
// github.com/glebarez/sqlite's and ncruces/go-sqlite3's): a 10 s busy timeout,
// WAL and immediate transactions, the settings Herald checks for
// (outboxhook.ErrSQLiteSettings says why each). Every DSN of Herald's tests,
// examples and messages is made here.
func DSN(path string) string { return WithSettings("file:"+path, false) }

// WithSettings is dsn with Herald's settings, in the syntax of
// modernc.org/sqlite or, with mattn, of github.com/mattn/go-sqlite3
// (_busy_timeout, _journal_mode). The parameters of dsn are kept, in order,
// except those that set the busy timeout, the journal mode or the transaction
// lock, which are replaced.
func WithSettings(dsn string, mattn bool) string {
	base, query, _ := strings.Cut(dsn, "?")
	var keep []string
	for p := range strings.SplitSeq(query, "&") {
		if p == "" || settingParam(p) {
			continue
		}
		keep = append(keep, p)
	}
	if mattn {
		keep = append(keep, fmt.Sprintf("_busy_timeout=%d", BusyTimeout), "_journal_mode=WAL", "_txlock=immediate")
	} else {
		keep = append(keep, fmt.Sprintf("_pragma=busy_timeout(%d)", BusyTimeout), "_pragma=journal_mode(WAL)", "_txlock=immediate")
	}
	return base + "?" + strings.Join(keep, "&")
}

// settingParam reports whether the DSN parameter p ("key=value") sets the
// busy timeout, the journal mode or the transaction lock, in either driver's
// syntax (modernc.org/sqlite also takes mattn's keys).
func settingParam(p string) bool {
	k, v, _ := strings.Cut(p, "=")
	k, _ = url.QueryUnescape(k)
	v, _ = url.QueryUnescape(v)
	switch strings.ToLower(k) {
	case "_txlock", "_busy_timeout", "_timeout", "_journal_mode", "_journal":
		return true
	case "_pragma":
		v = strings.ToLower(strings.TrimSpace(v))
		return strings.HasPrefix(v, "busy_timeout") || strings.HasPrefix(v, "journal_mode")
	}
	return false
}

// TxLock reads the _txlock parameter of dsn as both drivers do (the first
// one), lower-cased: "" when there is none, which is their default, deferred.
func TxLock(dsn string) string {
	_, query, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return ""
	}
	return strings.ToLower(q.Get("_txlock"))
}

// MemoryDSN reports whether dsn names an in-memory database (":memory:",
// mode=memory, or no file at all).
func MemoryDSN(dsn string) bool {
	base, query, _ := strings.Cut(dsn, "?")
	if strings.Contains(base, ":memory:") || base == "" || base == "file:" {
		return true
	}
	q, _ := url.ParseQuery(query)
	return strings.EqualFold(q.Get("mode"), "memory")
}
