package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/mysql"
)

// MySQL commits DDL statement by statement, so a schema Herald is creating
// is visible half-made: a relay that made the lease table and waits to build
// an index on an outbox in use (a writer's transaction holds its metadata
// lock) has not added the lease generation yet. Instances starting beside it
// (relays, the outbox hook, the inbox, Migrate) must wait for it, not find
// the schema outdated nor trip over its half-made objects.
func TestSchemaCreationIsSerialized(t *testing.T) {
	t.Parallel()
	drv := mysql.Driver{}
	out := ident.MustTable(store.DefaultOutbox)
	in := ident.MustTable(store.DefaultInbox)
	params := store.RelayCreateParams{Ordered: true, Retention: true}
	check := store.RelayCheckParams{Ordered: true, Retention: true}
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		db, err := sql.Open("mysql", mysqltest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := drv.Outbox(out).Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		// The load: a writer's transaction that read the outbox holds its
		// metadata lock, which an index build on it waits for.
		load, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := load.ExecContext(ctx, "SELECT COUNT(*) FROM "+mysql.Quote(out)); err != nil {
			t.Fatal(err)
		}

		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		run := func(name string, f func() error) {
			wg.Go(func() {
				if err := f(); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			})
		}
		for i := range 4 {
			run(fmt.Sprintf("relay %d", i), func() error {
				r := drv.Relay(out)
				if err := r.Create(ctx, db, params); err != nil {
					return err
				}
				return r.Check(ctx, db, check)
			})
		}
		// Those that start a moment later find the lease table made.
		time.Sleep(300 * time.Millisecond)
		for i := range 4 {
			run(fmt.Sprintf("check %d", i), func() error { return drv.Relay(out).Check(ctx, db, check) })
		}
		run("outbox hook", func() error {
			o := drv.Outbox(out)
			if err := o.Create(ctx, db); err != nil {
				return err
			}
			return o.Check(ctx, db)
		})
		run("inbox", func() error {
			i := drv.Inbox(in)
			if err := i.Create(ctx, db); err != nil {
				return err
			}
			return i.Check(ctx, db)
		})
		run("migrate", func() error {
			_, err := migrate.Migrate(ctx, db, drv)
			return err
		})
		time.Sleep(2 * time.Second)
		if err := load.Commit(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: instances starting together on a fresh database:\n%v", round, err)
		}
	}
}

// The schema lock holds a connection of the pool for the creation and the
// check, which run on it: a pool of one connection works.
func TestSchemaCreationOnAOneConnectionPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", mysqltest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	drv := mysql.Driver{}
	out := ident.MustTable(store.DefaultOutbox)
	if err := drv.Outbox(out).Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := drv.Outbox(out).Check(ctx, db); err != nil {
		t.Fatal(err)
	}
	r := drv.Relay(out)
	if err := r.Create(ctx, db, store.RelayCreateParams{Ordered: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(ctx, db, store.RelayCheckParams{Ordered: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Migrate(ctx, db, drv); err != nil {
		t.Fatal(err)
	}
	// The lock is released: the one connection takes it again.
	if err := drv.Inbox(ident.MustTable(store.DefaultInbox)).Check(ctx, db); err != nil {
		t.Fatal(err)
	}
	var free int
	if err := db.QueryRowContext(ctx, `SELECT IS_FREE_LOCK(CONCAT('herald_schema_', SHA1(DATABASE())))`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if free != 1 {
		t.Fatal("the schema lock is still held after the creations and checks")
	}
}
