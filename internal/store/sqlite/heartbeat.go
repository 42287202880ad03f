package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Heartbeats returns what the database knows of the relays of the outbox t.
// Times are unix microseconds (Now).
func (Driver) Heartbeats(t ident.Table) store.Heartbeats {
	lt, rt := t.Derived("_leases").Quoted(), t.Derived("_relays").Quoted()
	return heartbeats{
		create: `CREATE TABLE IF NOT EXISTS ` + rt + ` (
    instance TEXT    PRIMARY KEY,
    seen_at  INTEGER NOT NULL
)`,
		beat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES (?, ` + Now + `)
ON CONFLICT (instance) DO UPDATE SET seen_at = excluded.seen_at`,
		prune:     `DELETE FROM ` + rt + ` WHERE seen_at < ` + Now + ` - ?`,
		instances: `SELECT instance, ` + Now + ` - seen_at FROM ` + rt + ` ORDER BY seen_at DESC, instance`,
		leases: `SELECT owner, count(*), max(expires_at) - ` + Now + ` FROM ` + lt + `
WHERE owner <> '' GROUP BY owner ORDER BY owner`,
		due: `SELECT count(*), coalesce(` + Now + ` - min(available_at), 0) FROM ` + t.Quoted() + `
WHERE processed_at IS NULL AND dead_at IS NULL AND available_at <= ` + Now,
	}
}

type heartbeats struct{ create, beat, prune, instances, leases, due string }

func (h heartbeats) Create(ctx context.Context, x store.Execer) error {
	_, err := x.ExecContext(ctx, h.create)
	return err
}

func (h heartbeats) Beat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, h.beat, instance)
	return err
}

func (h heartbeats) Prune(ctx context.Context, x store.Execer, olderThan time.Duration) error {
	_, err := x.ExecContext(ctx, h.prune, olderThan.Microseconds())
	return err
}

func (h heartbeats) Instances(ctx context.Context, x store.Execer) ([]store.InstanceSeen, error) {
	return store.Collect(ctx, x, h.instances, nil, func(rows *sql.Rows) (store.InstanceSeen, error) { return store.ScanInstance(rows) })
}

func (h heartbeats) Leases(ctx context.Context, x store.Execer) ([]store.LeaseOwner, error) {
	return store.Collect(ctx, x, h.leases, nil, func(rows *sql.Rows) (store.LeaseOwner, error) { return store.ScanLeaseOwner(rows) })
}

func (h heartbeats) Due(ctx context.Context, x store.Execer) (int64, time.Duration, error) {
	var n, us int64
	err := store.QueryRow(ctx, x, h.due, nil, &n, &us)
	return n, time.Duration(us) * time.Microsecond, err
}
