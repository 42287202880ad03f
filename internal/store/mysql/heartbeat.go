package mysql

import (
	"context"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Heartbeats returns what the database knows of the relays of the outbox t.
func (Driver) Heartbeats(t ident.Table) store.Heartbeats {
	lt, rt := Quote(t.Derived("_leases")), Quote(t.Derived("_relays"))
	return sqlkit.HeartbeatSQL{
		Exists: func(ctx context.Context, x store.Execer) (bool, error) {
			return exists(ctx, x, t.Derived("_relays"), false, t.Derived("_relays"))
		},
		Create: `CREATE TABLE IF NOT EXISTS ` + rt + ` (
    instance VARCHAR(255) NOT NULL PRIMARY KEY,
    seen_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		Beat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES (?, ` + Now + `)
ON DUPLICATE KEY UPDATE seen_at = ` + Now,
		Prune:     `DELETE FROM ` + rt + ` WHERE seen_at < ` + Now + ` - INTERVAL ? MICROSECOND`,
		Instances: `SELECT instance, TIMESTAMPDIFF(MICROSECOND, seen_at, ` + Now + `) FROM ` + rt + ` ORDER BY seen_at DESC, instance`,
		Leases: `SELECT owner, COUNT(*), TIMESTAMPDIFF(MICROSECOND, ` + Now + `, MAX(expires_at)) FROM ` + lt + `
WHERE owner <> '' GROUP BY owner ORDER BY owner`,
		Seeded: `SELECT EXISTS (SELECT 1 FROM ` + lt + `)`,
		Due: `SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(available_at), ` + Now + `), 0) FROM ` + Quote(t) + `
WHERE processed_at IS NULL AND dead_at IS NULL AND available_at <= ` + Now,
		Next: `SELECT TIMESTAMPDIFF(MICROSECOND, ` + Now + `, MIN(available_at)) FROM ` + Quote(t) + `
WHERE processed_at IS NULL AND dead_at IS NULL`,
	}.Heartbeats()
}
