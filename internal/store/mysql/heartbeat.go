package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Heartbeats returns what the database knows of the relays of the outbox t.
func (Driver) Heartbeats(t ident.Table) store.Heartbeats {
	lt, rt := Quote(t.Derived("_leases")), Quote(t.Derived("_relays"))
	return heartbeats{
		create: `CREATE TABLE IF NOT EXISTS ` + rt + ` (
    instance VARCHAR(255) NOT NULL PRIMARY KEY,
    seen_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		beat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES (?, ` + Now + `)
ON DUPLICATE KEY UPDATE seen_at = ` + Now,
		prune:     `DELETE FROM ` + rt + ` WHERE seen_at < ` + Now + ` - INTERVAL ? MICROSECOND`,
		instances: `SELECT instance, TIMESTAMPDIFF(MICROSECOND, seen_at, ` + Now + `) FROM ` + rt + ` ORDER BY seen_at DESC, instance`,
		leases: `SELECT owner, COUNT(*), TIMESTAMPDIFF(MICROSECOND, ` + Now + `, MAX(expires_at)) FROM ` + lt + `
WHERE owner <> '' GROUP BY owner ORDER BY owner`,
		due: `SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(available_at), ` + Now + `), 0) FROM ` + Quote(t) + `
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
