package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// The relay's LISTEN takes a connection of its own, not one of the
// application's pool: with a pool of one connection, the process's saves go
// through while the relay listens, and a NOTIFY from another process (a
// Notifier on a pool of one too) wakes it (its polling is a minute apart).
// Before, the listener took the pool's one connection for ever: saves timed
// out and nothing was published.
func TestListenOutsideTheApplicationsPool(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	onePool := func() *env {
		db := pgtest.OpenDSN(t, dsn, nil)
		sqlDB, err := db.DB()
		testkit.Must(t, err)
		sqlDB.SetMaxOpenConns(1)
		return &env{t: t, db: db, dsn: dsn}
	}
	e := onePool()
	testkit.Must(t, e.db.Use(outboxhook.New(outboxhook.Config{})))
	testkit.Must(t, e.db.AutoMigrate(&Account{}))
	gc := newGoChannel()
	got := consume(t, gc, "account.deposited")
	channel := pgtest.Name("herald_")
	r, err := relay.New(e.db, gc, relay.Config{PollInterval: time.Minute, Channel: channel, Logger: quietLogger()})
	testkit.Must(t, err)
	e.run(r)
	time.Sleep(300 * time.Millisecond) // the relay's first look, and its LISTEN

	// A save of the relay's process.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID})
	first := a.Records()[0].ID
	if err := e.db.WithContext(ctx).Create(a).Error; err != nil {
		t.Fatalf("a save on a pool of one connection while the relay listens: %v", err)
	}

	// Another process's, with a Notifier.
	w := onePool()
	n, err := relay.NewNotifier(w.db, relay.NotifierConfig{Channel: channel})
	testkit.Must(t, err)
	nctx, ncancel := context.WithCancel(context.Background())
	t.Cleanup(ncancel)
	go func() { _ = n.Run(nctx) }()
	testkit.Must(t, w.db.Use(outboxhook.New(outboxhook.Config{Notify: n.Notify})))
	ids := w.write(3, 1)
	ids[a.ID] = []uuid.UUID{first}
	eventually(t, 10*time.Second, "the events published, woken by the NOTIFY", func() bool { return got.HasAll(idSet(ids)) })
}
