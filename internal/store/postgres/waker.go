package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Waker returns LISTEN/NOTIFY.
func (Driver) Waker() store.Waker { return waker{} }

type waker struct{}

// Listen opens a connection of its own, outside db's pool (with the
// configuration of db's pgx connections), LISTENs on channel and calls wake
// with each notification's payload (and once with "" on start, for what was
// committed meanwhile), until ctx is done or the connection fails; then it
// closes the connection. A session in LISTEN is never given back, so it
// takes none of the application's pool: a pool of one connection keeps it
// for the saves.
func (waker) Listen(ctx context.Context, db *sql.DB, channel string, wake func(payload string)) error {
	cfg, err := connConfig(ctx, db)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("listen: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Quoted: LISTEN folds an unquoted name to lower case, pg_notify does not.
	if _, err := conn.Exec(ctx, `LISTEN `+ident.Name(channel).Quoted()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		wake(n.Payload)
	}
}

// connConfig returns the pgx configuration db's connections are made with,
// read from one of its connections (given back at once).
func connConfig(ctx context.Context, db *sql.DB) (*pgx.ConnConfig, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	var cfg *pgx.ConnConfig
	err = c.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("listen: driver connection is %T, not pgx", dc)
		}
		cfg = pc.Conn().Config()
		// The copy keeps the pool connection's notification handler: the
		// listener's notifications would be buffered into that connection
		// (shared by every listener made from it, and never drained). Nil:
		// the listener's connection buffers its own.
		cfg.OnNotification = nil
		return nil
	})
	return cfg, err
}

// Notify sends pg_notify(channel) from a connection of db, outside any
// writer's transaction: with payloads, one notification each, in one
// statement (one transaction: the server delivers each distinct payload
// once).
func (waker) Notify(ctx context.Context, db *sql.DB, channel string, payloads ...string) error {
	if len(payloads) == 0 {
		_, err := db.ExecContext(ctx, `SELECT pg_notify($1, '')`, channel)
		return err
	}
	_, err := db.ExecContext(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) p`, channel, payloads)
	return err
}
