package conformance

// The inbox's keys: every (consumer, message id) is its own key on every
// database, whatever the id looks like, and keys stored by earlier versions
// still deduplicate.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// handled counts a handler's calls per message id.
type handled struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handled) handler() message.HandlerFunc {
	return noPublish(func(msg *message.Message) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.n == nil {
			h.n = map[string]int{}
		}
		h.n[msg.UUID]++
		return nil
	})
}

func (h *handled) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// deliver hands the message id to h and fails the test on an error.
func deliver(t *testing.T, h message.HandlerFunc, id string) {
	t.Helper()
	if _, err := h(message.NewMessage(id, nil)); err != nil {
		t.Fatalf("deliver %q: %v", id, err)
	}
}

// Ids, and consumer names, that differ only by trailing spaces are different
// keys on every database: MySQL's and MariaDB's utf8mb4_bin ignores trailing
// spaces in comparisons (PAD SPACE), which made the second a duplicate.
func testInboxTrailingSpaceIDs(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var got handled
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(got.handler())
	ids := []string{"a", "a ", "a  ", "b  ", "b"}
	for range 2 {
		for _, id := range ids {
			deliver(t, h, id)
		}
	}
	for _, id := range ids {
		if n := got.count(id); n != 1 {
			t.Errorf("id %q handled %d times, want 1", id, n)
		}
	}
	// Consumers whose names differ by a trailing space each handle the id.
	var first, second handled
	h1 := e.inbox(inbox.Config{Consumer: "billing"}).Middleware(first.handler())
	h2 := e.inbox(inbox.Config{Consumer: "billing "}).Middleware(second.handler())
	for range 2 {
		deliver(t, h1, "m")
		deliver(t, h2, "m")
	}
	if first.count("m") != 1 || second.count("m") != 1 {
		t.Errorf("consumers %q and %q handled the id %d and %d times, want 1 and 1",
			"billing", "billing ", first.count("m"), second.count("m"))
	}
}

// An id that is literally what a long id is stored as ("sha256:" and the
// hex of its SHA-256, or today's prefix) is another message than the long id,
// in either order.
func testInboxHashPrefixIDs(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	long := strings.Repeat("L", inbox.MaxKeyBytes+1)
	sum := sha256.Sum256([]byte(long))
	for i, prefix := range []string{"sha256:", "#sha256:"} {
		literal := prefix + hex.EncodeToString(sum[:])
		for j, order := range [][]string{{long, literal}, {literal, long}} {
			var got handled
			h := e.inbox(inbox.Config{Consumer: "c" + string(rune('0'+2*i+j))}).Middleware(got.handler())
			for range 2 {
				for _, id := range order {
					deliver(t, h, id)
				}
			}
			if got.count(long) != 1 || got.count(literal) != 1 {
				t.Errorf("%q after %q: handled %d and %d times, want 1 and 1",
					order[1][:12], order[0][:12], got.count(order[1]), got.count(order[0]))
			}
		}
	}
	// A consumer named so is another consumer than the long name.
	var a, b handled
	ha := e.inbox(inbox.Config{Consumer: long}).Middleware(a.handler())
	hb := e.inbox(inbox.Config{Consumer: "sha256:" + hex.EncodeToString(sum[:])}).Middleware(b.handler())
	deliver(t, ha, "m")
	deliver(t, hb, "m")
	if a.count("m") != 1 || b.count("m") != 1 {
		t.Errorf("consumers: handled %d and %d times, want 1 and 1", a.count("m"), b.count("m"))
	}
}

// Keys stored by earlier versions deduplicate after the upgrade: ids stored
// as given before long ids were hashed (PostgreSQL, SQLite), long ids hashed
// under the "sha256:" prefix, ids ending in a space or beginning with the
// prefix stored as given. A key the database could never hold is skipped
// (MySQL refused long ids, PostgreSQL NUL bytes).
func testInboxKeysOfEarlierVersions(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	e.inbox(inbox.Config{}) // the table
	at, arg := dl.SQL.Ago(0)
	raw := func(consumer, id string) bool {
		err := e.db.Exec(`INSERT INTO inbox_messages (consumer, message_id, processed_at) VALUES (?, ?, `+at+`)`,
			consumer, id, arg).Error
		if err != nil {
			t.Logf("the database refuses the key (%q, %.20q): %v", consumer, id, err)
		}
		return err == nil
	}
	hashed := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	long := strings.Repeat("l", 300)
	longConsumer := strings.Repeat("c", 300)
	for _, c := range []struct {
		name                     string
		consumer, id             string // what the message is
		storedConsumer, storedID string // what an earlier version stored
	}{
		{"long id as given", "c", long, "c", long},
		{"long id hashed under sha256:", "c", long + "2", "c", hashed(long + "2")},
		{"long consumer as given", longConsumer, "m", longConsumer, "m"},
		{"long consumer hashed under sha256:", longConsumer + "2", "m", hashed(longConsumer + "2"), "m"},
		{"id with a NUL byte as given", "c", "n\x00ul", "c", "n\x00ul"},
		{"id with invalid UTF-8 as given", "c", "bad\xff", "c", "bad\xff"},
		{"id ending in a space", "c", "s ", "c", "s "},
		{"consumer ending in a space", "c ", "m2", "c ", "m2"},
		{"id beginning with sha256:", "c", "sha256:abc", "c", "sha256:abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !raw(c.storedConsumer, c.storedID) {
				t.Skip("the database refuses the key: no earlier version stored it")
			}
			var got handled
			h := e.inbox(inbox.Config{Consumer: c.consumer}).Middleware(got.handler())
			deliver(t, h, c.id)
			if n := got.count(c.id); n != 0 {
				t.Fatalf("handled again after the upgrade (%d times)", n)
			}
		})
	}
	t.Run("DisableLegacyKeys", func(t *testing.T) { testInboxLegacyKeysDisabled(t, e, raw) })
	// An earlier row equal to the id only up to trailing spaces is another
	// message's.
	t.Run("trailing spaces are kept apart", func(t *testing.T) {
		raw("c", "t")
		var got handled
		h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(got.handler())
		deliver(t, h, "t ")
		if got.count("t ") != 1 {
			t.Fatalf("%q after an earlier %q: handled %d times, want 1", "t ", "t", got.count("t "))
		}
	})
}

// With DisableLegacyKeys the keys of earlier versions are not looked up.
func testInboxLegacyKeysDisabled(t *testing.T, e *inboxEnv, raw func(consumer, id string) bool) {
	raw("c", "d ")
	var got handled
	h := e.inbox(inbox.Config{Consumer: "c", DisableLegacyKeys: true}).Middleware(got.handler())
	deliver(t, h, "d ")
	if got.count("d ") != 1 {
		t.Fatalf("handled %d times, want 1: the earlier key was looked up", got.count("d "))
	}
}

// The lookup of an earlier key, a key that is missing, holds no lock that
// makes another message's insert wait, at the isolation level the handler's
// transaction runs at (MySQL and MariaDB: REPEATABLE READ, where a locking
// read of a missing key takes a gap lock). While a message whose id ends in a
// space is being handled, messages whose keys sort next to it (and one equal
// to it up to the trailing space) are handled at once.
func testInboxEarlierKeysLookupBlocksNoInsert(t *testing.T, dl testkit.Dialect) {
	if dl.SQL.OneWriter() {
		t.Skip("one writer at a time: every other insert waits")
	}
	e := newInboxEnv(t, dl)
	var got handled
	others := e.inbox(inbox.Config{Consumer: "c"}).Middleware(got.handler())
	for _, id := range []string{"a", "z"} {
		deliver(t, others, id)
	}
	neighbours := []string{"m", "n", "b", "y", "m!", "l"}
	done := make(chan error, 1)
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
		wantRepeatableRead(t, dl, inbox.Tx(msg.Context()))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, id := range neighbours {
				m := message.NewMessage(id, nil)
				m.SetContext(ctx)
				if _, err := others(m); err != nil {
					done <- errors.Join(errors.New("deliver "+id), err)
					return
				}
			}
			done <- nil
		}()
		return <-done
	}))
	deliver(t, h, "m ")
	for _, id := range neighbours {
		if got.count(id) != 1 {
			t.Errorf("id %q handled %d times, want 1", id, got.count(id))
		}
	}
}

// wantRepeatableRead fails t unless tx, on MySQL, runs at REPEATABLE READ
// (the isolation whose gap locks the inbox's reads must not take).
func wantRepeatableRead(t *testing.T, dl testkit.Dialect, tx *gorm.DB) {
	t.Helper()
	if dl.Name != "mysql" {
		return
	}
	var level string
	if err := tx.Raw(`SELECT @@SESSION.transaction_isolation`).Scan(&level).Error; err != nil {
		must(t, tx.Raw(`SELECT @@SESSION.tx_isolation`).Scan(&level).Error) // MariaDB before 11.1
	}
	if level != "REPEATABLE-READ" {
		t.Errorf("the handler's transaction runs at %s, want REPEATABLE-READ", level)
	}
}
