package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

var hostTests = []namedTest{
	{"UnrelatedSaveNeverWaits", testHostUnrelatedSaveNeverWaits},
	{"KeysAreExact", testHostKeysAreExact},
}

// hostWait is how long an unrelated save may take beside a caller's open
// transaction before the matrix calls it held back: far above a save's time
// on a busy machine, far below a lock wait's (MySQL's 50 s, the test's end).
const hostWait = 3 * time.Second

// hostFixture is what the matrix's calls name: a scheduled event not due
// (hit), one published and deleted (deleted), their keys.
type hostFixture struct {
	hit, deleted uuid.UUID
	hitKey       string
}

// hostCall is one row of the matrix: an API that runs SQL inside the
// caller's transaction, called in tx (held open afterwards).
type hostCall struct {
	name string
	// gapAtTheTail: the call reads an id or key where no event is, in the
	// gap where other saves insert (see heldBack).
	gapAtTheTail bool
	call         func(tx *gorm.DB, f hostFixture) error
}

// Ids and keys that sort first and last among the outbox's: a gap lock at
// either end of an index would hold back the inserts that land there.
var (
	firstID  = uuid.MustParse("00000000-0000-7000-8000-000000000000")
	lastID   = uuid.MustParse("ffffffff-ffff-7fff-bfff-ffffffffffff")
	firstKey = "!"
	lastKey  = "\u00ff\u00ff"
)

// hostCalls are the matrix's rows: every API that runs SQL in the caller's
// transaction, with ids and keys that hit, miss, sort first and sort last.
// A new caller-transaction API joins the matrix by adding its rows here.
func hostCalls() []hostCall {
	deposit := func(tx *gorm.DB) error {
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID})
		return tx.Create(a).Error
	}
	isErr := func(want ...error) func(error) error {
		return func(err error) error {
			for _, w := range want {
				if err == nil && w == nil || err != nil && w != nil && errors.Is(err, w) {
					return nil
				}
			}
			return err
		}
	}
	cancel := func(id func(hostFixture) uuid.UUID, ok func(error) error) func(*gorm.DB, hostFixture) error {
		return func(tx *gorm.DB, f hostFixture) error { return ok(outboxhook.Cancel(tx, id(f))) }
	}
	move := func(id func(hostFixture) uuid.UUID, ok func(error) error) func(*gorm.DB, hostFixture) error {
		return func(tx *gorm.DB, f hostFixture) error {
			return ok(outboxhook.Move(tx, id(f), events.After(2*time.Hour)))
		}
	}
	cancelKey := func(key func(hostFixture) string) func(*gorm.DB, hostFixture) error {
		return func(tx *gorm.DB, f hostFixture) error { _, err := outboxhook.CancelKey(tx, key(f)); return err }
	}
	moveKey := func(key func(hostFixture) string) func(*gorm.DB, hostFixture) error {
		return func(tx *gorm.DB, f hostFixture) error {
			_, err := outboxhook.MoveKey(tx, key(f), events.After(2*time.Hour))
			return err
		}
	}
	hit := func(f hostFixture) uuid.UUID { return f.hit }
	deleted := func(f hostFixture) uuid.UUID { return f.deleted }
	unknown := func(hostFixture) uuid.UUID { return uuid.Must(uuid.NewV7()) }
	first := func(hostFixture) uuid.UUID { return firstID }
	last := func(hostFixture) uuid.UUID { return lastID }
	hitKey := func(f hostFixture) string { return f.hitKey }
	missKey := func(hostFixture) string { return "reminder:" + uuid.NewString() }
	firstK := func(hostFixture) string { return firstKey }
	lastK := func(hostFixture) string { return lastKey }
	missing := isErr(outboxhook.ErrNotScheduled)
	return []hostCall{
		{"save", false, func(tx *gorm.DB, _ hostFixture) error { return deposit(tx) }},
		{"Add", false, func(tx *gorm.DB, _ hostFixture) error {
			return outboxhook.Add(tx, Deposited{AccountID: uuid.New()})
		}},
		{"AddMessages", false, func(tx *gorm.DB, _ hostFixture) error {
			return outboxhook.AddMessages(tx, depositedTopic, message.NewMessage(uuid.NewString(), []byte(`{}`)))
		}},
		{"Schedule", false, func(tx *gorm.DB, _ hostFixture) error {
			return outboxhook.Schedule(tx, events.After(time.Hour).Keyed("reminder:"+uuid.NewString()), Deposited{AccountID: uuid.New()})
		}},
		{"ScheduleKeyedFirst", false, func(tx *gorm.DB, _ hostFixture) error {
			return outboxhook.Schedule(tx, events.After(time.Hour).Keyed(firstKey), Deposited{AccountID: uuid.New()})
		}},
		{"Cancel/hit", false, cancel(hit, isErr(nil))},
		{"Cancel/deleted", true, cancel(deleted, missing)},
		{"Cancel/unknown", true, cancel(unknown, missing)},
		{"Cancel/first", false, cancel(first, missing)},
		{"Cancel/last", true, cancel(last, missing)},
		{"Move/hit", false, move(hit, isErr(nil))},
		{"Move/deleted", true, move(deleted, missing)},
		{"Move/unknown", true, move(unknown, missing)},
		{"Move/first", false, move(first, missing)},
		{"Move/last", true, move(last, missing)},
		{"CancelKey/hit", false, cancelKey(hitKey)},
		{"CancelKey/miss", false, cancelKey(missKey)},
		{"CancelKey/first", true, cancelKey(firstK)},
		{"CancelKey/last", false, cancelKey(lastK)},
		{"MoveKey/hit", false, moveKey(hitKey)},
		{"MoveKey/miss", false, moveKey(missKey)},
		{"MoveKey/first", true, moveKey(firstK)},
		{"MoveKey/last", false, moveKey(lastK)},
		// The same, recorded on an aggregate and applied by its save.
		{"aggregate.Cancel/hit", false, fromAggregate(func(a *Account, f hostFixture) { a.Cancel(f.hit) })},
		{"aggregate.Cancel/deleted", true, fromAggregate(func(a *Account, f hostFixture) { a.Cancel(f.deleted) })},
		{"aggregate.Cancel/last", true, fromAggregate(func(a *Account, _ hostFixture) { a.Cancel(lastID) })},
		{"aggregate.Move/hit", false, fromAggregate(func(a *Account, f hostFixture) { a.Move(f.hit, events.After(2*time.Hour)) })},
		{"aggregate.CancelKey/hit", false, fromAggregate(func(a *Account, f hostFixture) { a.CancelKey(f.hitKey) })},
		{"aggregate.CancelKey/miss", false, fromAggregate(func(a *Account, _ hostFixture) { a.CancelKey("reminder:" + uuid.NewString()) })},
		{"aggregate.CancelKey/first", true, fromAggregate(func(a *Account, _ hostFixture) { a.CancelKey(firstKey) })},
		{"aggregate.MoveKey/last", false, fromAggregate(func(a *Account, _ hostFixture) { a.MoveKey(lastKey, events.After(2*time.Hour)) })},
	}
}

// fromAggregate is a matrix call that records a cancel or move on a new
// account (rec) and saves it with an event: the plugin applies it in the
// save's transaction.
func fromAggregate(rec func(a *Account, f hostFixture)) func(*gorm.DB, hostFixture) error {
	return func(tx *gorm.DB, f hostFixture) error {
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID})
		rec(a, f)
		return tx.Create(a).Error
	}
}

// isolations are the isolation levels d offers a caller's transaction
// (SQLite: its one, the default).
func isolations(d testkit.Dialect) []sql.IsolationLevel {
	if d.Name == "sqlite" {
		return []sql.IsolationLevel{sql.LevelDefault}
	}
	return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
}

// The host-safety matrix: for every API that runs SQL inside the caller's
// transaction, at every isolation level the database offers, by every GORM
// path a transaction is begun by (txPaths), with that
// transaction held open after the call, an unrelated save of an ordinary
// event from another connection completes without waiting for it. On
// SQLite a transaction holds the one write lock from its BEGIN (Herald's
// DSN: BEGIN IMMEDIATE): there every save waits for any open transaction,
// Herald's calls or not, and the matrix checks that the save goes through
// once the transaction ends. The inbox's insert runs in the handler's
// transaction, which the inbox begins (the database's default isolation):
// its row holds the handler open.
func testHostUnrelatedSaveNeverWaits(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	bystander := e.open()
	must(t, bystander.Use(outboxhook.New(outboxhook.Config{})))
	must(t, e.db.AutoMigrate(&HostNote{}))
	in, err := inbox.New(e.db, inbox.Config{Consumer: "host", Logger: quiet()})
	must(t, err)
	inRenamed, err := inbox.New(e.db, inbox.Config{Consumer: "host2", Logger: quiet(),
		FormerConsumers: map[string][]string{"host2": {"host-old", "host-older"}}})
	must(t, err)
	// Events at both ends of the indexes, and keyed ones beside the keys
	// the calls name, as an outbox in use has.
	must(t, e.db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Schedule(tx, events.After(time.Hour).Keyed("m:middle"), Deposited{AccountID: uuid.New()})
	}))
	fixture := func(t *testing.T) hostFixture {
		t.Helper()
		f := hostFixture{hitKey: "reminder:" + uuid.NewString()}
		a := &Account{ID: uuid.New()}
		a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.After(time.Hour).Keyed(f.hitKey))
		a.Schedule(Deposited{AccountID: a.ID, Seq: 2}, events.After(time.Hour))
		f.hit, f.deleted = a.Records()[0].ID, a.Records()[1].ID
		must(t, e.db.Create(a).Error)
		// Published and deleted, as a relay without retention leaves it:
		// the tail of the id index, where the next ids go.
		must(t, e.db.Exec(`DELETE FROM outbox_messages WHERE id = ?`, f.deleted.String()).Error)
		return f
	}
	save := func(ctx context.Context) error {
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID})
		return bystander.WithContext(ctx).Create(a).Error
	}
	// check holds tx open (begun, the call made) while the unrelated save
	// runs, and ends it.
	check := func(t *testing.T, heldBack string, end func() error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hostWait)
		defer cancel()
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- save(ctx) }()
		if heldBack != "" {
			// Held back by the database's own rule (heldBack): the save
			// goes through once the caller's transaction ends.
			time.Sleep(100 * time.Millisecond)
			must(t, end())
			if err := <-done; err != nil {
				t.Fatalf("the unrelated save after the caller's transaction ended: %v", err)
			}
			return
		}
		err := <-done
		took := time.Since(start)
		must(t, end())
		if err != nil {
			t.Fatalf("an unrelated save beside the open transaction failed after %v (held back?): %v", took.Round(time.Millisecond), err)
		}
	}
	for _, iso := range isolations(dl) {
		t.Run(isoName(iso), func(t *testing.T) {
			for _, path := range txPaths {
				t.Run(path.name, func(t *testing.T) {
					for _, c := range hostCalls() {
						t.Run(c.name, func(t *testing.T) {
							f := fixture(t)
							made, release, ended := make(chan error, 1), make(chan struct{}), make(chan error, 1)
							go func() {
								ended <- path.run(e.db, &sql.TxOptions{Isolation: iso}, func(tx *gorm.DB) error {
									// A read first, as a service's transaction
									// mostly begins (at REPEATABLE READ it fixes
									// the snapshot), of a table of its own: at
									// MySQL's SERIALIZABLE the host's own reads
									// lock what they read.
									var n int64
									err := tx.Model(&HostNote{}).Count(&n).Error
									if err == nil {
										err = c.call(tx, f)
									}
									made <- err
									<-release
									return errHostRollback
								})
							}()
							if err := wait(t, made, 10*time.Second, c.name); err != nil {
								close(release)
								t.Fatalf("%s: %v", c.name, err)
							}
							check(t, heldBack(dl, iso, c), func() error {
								close(release)
								if err := <-ended; !errors.Is(err, errHostRollback) {
									return err
								}
								return nil
							})
						})
					}
				})
			}
		})
	}
	// The inbox's statements in the handler's transaction: its insert, and
	// with an intent key and a consumer's former names, their lookups.
	for _, tc := range []struct {
		name string
		in   *inbox.Inbox
		key  string
	}{
		{"inbox", in, ""},
		{"inbox/intent key, former names", inRenamed, "refund:" + uuid.NewString()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			h := tc.in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				close(entered)
				<-release
				return nil, nil
			})
			handled := make(chan error, 1)
			msg := message.NewMessage(uuid.Must(uuid.NewV7()).String(), []byte(`{}`))
			if tc.key != "" {
				msg.Metadata.Set(events.MetaDedupKey, tc.key)
			}
			go func() {
				_, err := h(msg)
				handled <- err
			}()
			wait(t, entered, 10*time.Second, "the handler")
			check(t, heldBack(dl, sql.LevelDefault, hostCall{}), func() error { close(release); return <-handled })
		})
	}
}

// HostNote is a table of the service's own, which the matrix's caller reads
// before calling Herald.
type HostNote struct {
	ID   uint `gorm:"primaryKey"`
	Text string
}

// heldBack says why, by the database's own rule, an unrelated save waits for
// a caller's transaction that made call at iso ("": it must not wait).
//   - SQLite: a transaction holds the one write lock from its BEGIN (Herald's
//     DSN: BEGIN IMMEDIATE), whatever it calls.
//   - MySQL's SERIALIZABLE: every read of the transaction locks what it
//     reads, the gaps of the index it searches included, as the host's own
//     reads do; a Cancel or Move of an id no event has where the next ids
//     go (the tail of the id index), or of a key sorting before every key
//     (where the unkeyed events go), locks the gap an insert needs
//     (docs/limits.md).
func heldBack(d testkit.Dialect, iso sql.IsolationLevel, call hostCall) string {
	switch {
	case d.Name == "sqlite":
		return "SQLite's one write lock, the caller's from BEGIN"
	case d.Name == "mysql" && iso == sql.LevelSerializable && call.gapAtTheTail:
		return "MySQL's SERIALIZABLE reads lock the gaps they search"
	}
	return ""
}

// errHostRollback ends a matrix caller's transaction: rolled back.
var errHostRollback = errors.New("the caller rolls back")

// txPaths are the GORM paths a caller's transaction is begun by: Begin,
// Transaction, a PrepareStmt session, a nested transaction (a savepoint)
// and db.Connection's connection (a statement on it first, as a session
// setting is). run runs fn in a transaction of the path at opts and
// returns fn's error.
var txPaths = []struct {
	name string
	run  func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error
}{
	{"Begin", func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
		tx := db.Begin(opts)
		if tx.Error != nil {
			return tx.Error
		}
		defer tx.Rollback()
		return fn(tx)
	}},
	{"Transaction", func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
		return db.Transaction(fn, opts)
	}},
	{"PrepareStmt", func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
		return db.Session(&gorm.Session{PrepareStmt: true}).Transaction(fn, opts)
	}},
	{"Savepoint", func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
		return db.Transaction(func(tx *gorm.DB) error { return tx.Transaction(fn) }, opts)
	}},
	{"Connection", func(db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
		return db.Connection(func(c *gorm.DB) error {
			if err := c.Exec("SELECT 1").Error; err != nil {
				return err
			}
			return c.Transaction(fn, opts)
		})
	}},
}

// isoName names an isolation level for a subtest ("default" for SQLite's).
func isoName(iso sql.IsolationLevel) string {
	if iso == sql.LevelDefault {
		return "default"
	}
	return iso.String()
}

// Keys name exactly what they say on every database: a key differing by a
// trailing space, by case or by Unicode normalisation is another key.
func testHostKeysAreExact(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	base := "invoice:" + uuid.NewString()
	nfc, nfd := "caf\u00e9:"+base, "cafe\u0301:"+base
	keys := []string{base, base + " ", base + "  ", " " + base, upper(base), nfc, nfd}
	must(t, e.db.Transaction(func(tx *gorm.DB) error {
		for _, k := range keys {
			if err := outboxhook.Schedule(tx, events.After(time.Hour).Keyed(k), Deposited{AccountID: uuid.New()}); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, k := range keys {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			res, err := outboxhook.MoveKey(tx, k, events.After(2*time.Hour))
			if err == nil && res != (outboxhook.Rescheduled{Changed: 1}) {
				err = fmt.Errorf("MoveKey(%q) = %+v, want the one event of that key changed", k, res)
			}
			return err
		}))
	}
	for i, k := range keys {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			res, err := outboxhook.CancelKey(tx, k)
			if err == nil && res != (outboxhook.Rescheduled{Changed: 1}) {
				err = fmt.Errorf("CancelKey(%q) = %+v, want the one event of that key cancelled", k, res)
			}
			return err
		}))
		if n := testkit.Pending(t, e.db); n != int64(len(keys)-i-1) {
			t.Fatalf("after cancelling %q: %d events pending, want %d", k, n, len(keys)-i-1)
		}
	}
}

// upper is s with its ASCII letters in upper case.
func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
