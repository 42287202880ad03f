package outboxhook_test

// SQLite's connection settings (issue 22): a file opened the obvious way, by
// its path, is refused at db.Use, relay.New and inbox.New with
// ErrSQLiteSettings, naming the DSN to use; on that DSN eight concurrent
// writers lose no transaction. Both drivers gorm.io/driver/sqlite opens:
// modernc.org/sqlite (DriverName "sqlite", pure Go, what Herald's tests run
// on) and mattn/go-sqlite3 (cgo, the dialector's default: sqlite.Open).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// sqliteDriver is one of the database/sql drivers gorm.io/driver/sqlite
// opens, with the settings in its DSN syntax.
type sqliteDriver struct {
	name     string
	open     func(dsn string) gorm.Dialector
	settings string // the busy timeout, WAL and _txlock=immediate
}

var sqliteDrivers = []sqliteDriver{
	{"modernc", func(dsn string) gorm.Dialector { return sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}) },
		"_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
	{"mattn", sqlite.Open, "_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"},
}

// openSQLite opens GORM on dsn through d, closed at the test's end.
func openSQLite(t *testing.T, d sqliteDriver, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d.open(dsn), &gorm.Config{Logger: logger.Discard})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// A file opened by its path alone is refused by db.Use, relay.New and
// inbox.New, and the message names the DSN to open it with, in the driver's
// syntax; each setting missing alone is refused and named.
func TestSQLiteSettingsRequired(t *testing.T) {
	t.Parallel()
	for _, d := range sqliteDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			db := openSQLite(t, d, path)
			want := fmt.Sprintf("%q", path+"?"+d.settings)
			err := db.Use(outboxhook.New(outboxhook.Config{}))
			if !errors.Is(err, outboxhook.ErrSQLiteSettings) || !strings.Contains(err.Error(), want) {
				t.Fatalf("db.Use = %v, want ErrSQLiteSettings naming %s", err, want)
			}
			t.Log(err)
			if _, err := relay.New(db, testkit.NewGoChannel(), relay.Config{}); !errors.Is(err, relay.ErrSQLiteSettings) || !strings.Contains(err.Error(), want) {
				t.Fatalf("relay.New = %v, want ErrSQLiteSettings naming %s", err, want)
			}
			if _, err := inbox.New(db, inbox.Config{}); !errors.Is(err, inbox.ErrSQLiteSettings) || !strings.Contains(err.Error(), want) {
				t.Fatalf("inbox.New = %v, want ErrSQLiteSettings naming %s", err, want)
			}
			// The DSN named opens the same file, and passes.
			must(t, openSQLite(t, d, path+"?"+d.settings).Use(outboxhook.New(outboxhook.Config{})))
		})
	}
	for _, c := range []struct{ name, query, says string }{
		{"NoBusyTimeout", "_pragma=journal_mode(WAL)&_txlock=immediate", "no busy timeout"},
		{"Deferred", "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", "deferred transactions"},
		{"ExplicitDeferred", "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=deferred", "deferred transactions"},
		{"NoWAL", "_pragma=busy_timeout(5000)&_txlock=immediate", "journal_mode delete, not WAL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			db := openSQLite(t, sqliteDrivers[0], "file:"+path+"?"+c.query+"&_pragma=foreign_keys(1)")
			err := db.Use(outboxhook.New(outboxhook.Config{}))
			// The DSN named keeps the caller's other parameters.
			want := fmt.Sprintf("%q", "file:"+path+"?_pragma=foreign_keys(1)&"+sqliteDrivers[0].settings)
			if !errors.Is(err, outboxhook.ErrSQLiteSettings) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), want) {
				t.Fatalf("db.Use = %v, want ErrSQLiteSettings saying %q, naming %s", err, c.says, want)
			}
		})
	}
}

// A dialector opened on an existing connection (sqlite.Config{Conn: ...})
// shows no DSN: the busy timeout and WAL are asked of the connection and
// checked, the transaction lock cannot be seen and is not.
func TestSQLiteSettingsExistingConnection(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, dsn string) *gorm.DB {
		t.Helper()
		sqlDB, err := sql.Open("sqlite", dsn)
		must(t, err)
		t.Cleanup(func() { _ = sqlDB.Close() })
		db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
		must(t, err)
		return db
	}
	err := open(t, filepath.Join(t.TempDir(), "app.db")).Use(outboxhook.New(outboxhook.Config{}))
	if !errors.Is(err, outboxhook.ErrSQLiteSettings) || !strings.Contains(err.Error(), "no busy timeout") ||
		!strings.Contains(err.Error(), "not WAL") || strings.Contains(err.Error(), "deferred") {
		t.Fatalf("db.Use = %v, want ErrSQLiteSettings for the busy timeout and WAL only", err)
	}
	must(t, open(t, "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)").
		Use(outboxhook.New(outboxhook.Config{})))
}

// The recommended DSN passes db.Use, relay.New and inbox.New, on both
// drivers; so does _txlock=exclusive.
func TestSQLiteRecommendedDSN(t *testing.T) {
	t.Parallel()
	for _, d := range sqliteDrivers {
		for _, lock := range []string{"immediate", "exclusive"} {
			t.Run(d.name+"/"+lock, func(t *testing.T) {
				t.Parallel()
				dsn := "file:" + filepath.Join(t.TempDir(), "app.db") + "?" + strings.Replace(d.settings, "immediate", lock, 1)
				db := openSQLite(t, d, dsn)
				must(t, db.Use(outboxhook.New(outboxhook.Config{})))
				_, err := relay.New(db, testkit.NewGoChannel(), relay.Config{})
				must(t, err)
				_, err = inbox.New(db, inbox.Config{})
				must(t, err)
			})
		}
	}
	// testkit's DSN, which every SQLite test opens, passes too.
	t.Run("testkit", func(t *testing.T) {
		t.Parallel()
		must(t, testkit.SQLite.OpenNew(t, nil).Use(outboxhook.New(outboxhook.Config{})))
	})
}

// The user's scenario (issue 22): 8 goroutines, 20 transactions each, saving
// through GORM with the plugin, on the recommended DSN. Each transaction reads
// before it writes, as a deferred one would fail to upgrade. None fails, and
// every event is in the outbox.
func TestSQLiteConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, d := range sqliteDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := openSQLite(t, d, "file:"+filepath.Join(t.TempDir(), "app.db")+"?"+d.settings)
			must(t, db.Use(outboxhook.New(outboxhook.Config{})))
			must(t, db.AutoMigrate(&Order{}))
			if failed := concurrentSaves(db, 8, 20); len(failed) > 0 {
				t.Fatalf("%d of 160 transactions failed, first: %v", len(failed), failed[0])
			}
			if n := count(t, db, "outbox_messages"); n != 320 {
				t.Fatalf("outbox has %d rows, want 320", n)
			}
		})
	}
}

// concurrentSaves runs writers goroutines of n transactions each: each reads
// the orders table, creates an order (OrderPlaced) and pays it (OrderPaid). It
// returns the errors of those that failed.
func concurrentSaves(db *gorm.DB, writers, n int) []error {
	var (
		mu     sync.Mutex
		failed []error
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range writers {
		wg.Go(func() {
			for range n {
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					var seen int64
					if err := tx.Model(&Order{}).Where("status = ?", "paid").Count(&seen).Error; err != nil {
						return err
					}
					o := NewOrder()
					if err := tx.Create(o).Error; err != nil {
						return err
					}
					o.Pay(int(seen))
					return tx.Save(o).Error
				})
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// An in-memory database cannot be in WAL mode, and on a pool of several
// connections is one database per connection, or with a shared cache locks
// table by table: it is refused, naming a file DSN. On a pool of one
// connection it passes, and the 8 writers take turns on it with a relay: no
// transaction fails, and the relay publishes every event.
func TestSQLiteInMemory(t *testing.T) {
	t.Parallel()
	for _, d := range sqliteDrivers {
		for _, dsn := range []string{":memory:", "file::memory:?cache=shared", "file:" + uuid.NewString() + "?mode=memory&cache=shared&" + d.settings} {
			t.Run(d.name+"/"+dsn, func(t *testing.T) {
				t.Parallel()
				db := openSQLite(t, d, dsn)
				err := db.Use(outboxhook.New(outboxhook.Config{}))
				if !errors.Is(err, outboxhook.ErrSQLiteSettings) || !strings.Contains(err.Error(), "in-memory") ||
					!strings.Contains(err.Error(), fmt.Sprintf("%q", "file:app.db?"+d.settings)) {
					t.Fatalf("db.Use = %v, want ErrSQLiteSettings for an in-memory database, naming a file DSN", err)
				}
				db = openSQLite(t, d, dsn)
				sqlDB, err := db.DB()
				must(t, err)
				sqlDB.SetMaxOpenConns(1)
				pub := &countingPublisher{Publisher: testkit.NewGoChannel()}
				r, err := relay.New(db, pub, relay.Config{Logger: testkit.Quiet()})
				must(t, err)
				must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
				must(t, db.AutoMigrate(&Order{}))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()
				t.Cleanup(func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("relay: %v", err)
					}
				})
				if failed := concurrentSaves(db, 8, 20); len(failed) > 0 {
					t.Fatalf("%d of 160 transactions failed, first: %v", len(failed), failed[0])
				}
				// Published, then marked: the marks come after the publishes.
				testkit.Eventually(t, 30*time.Second, "the relay to publish and mark every event", func() bool {
					return pub.n.Load() >= 320 && testkit.Pending(t, db) == 0
				})
				if n := testkit.Pending(t, db); n != 0 || pub.n.Load() != 320 {
					t.Fatalf("%d events published, %d pending; want 320, 0", pub.n.Load(), n)
				}
			})
		}
	}
}

// countingPublisher counts the messages published through it.
type countingPublisher struct {
	message.Publisher
	n atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.n.Add(int64(len(msgs)))
	return nil
}
