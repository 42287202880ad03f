package sqlite

import (
	"context"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Heartbeats returns what the database knows of the relays of the outbox t.
// Times are unix microseconds (Now).
func (Driver) Heartbeats(t ident.Table) store.Heartbeats {
	lt, rt := t.Derived("_leases").Quoted(), t.Derived("_relays").Quoted()
	return sqlkit.HeartbeatSQL{
		Exists: func(ctx context.Context, x store.Execer) (bool, error) { return exists(ctx, x, t.Derived("_relays")) },
		Create: `CREATE TABLE IF NOT EXISTS ` + rt + ` (
    instance TEXT    PRIMARY KEY,
    seen_at  INTEGER NOT NULL
)`,
		Beat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES (?, ` + Now + `)
ON CONFLICT (instance) DO UPDATE SET seen_at = excluded.seen_at`,
		Prune:     `DELETE FROM ` + rt + ` WHERE seen_at < ` + Now + ` - ?`,
		Instances: `SELECT instance, ` + Now + ` - seen_at FROM ` + rt + ` ORDER BY seen_at DESC, instance`,
		Leases: `SELECT owner, count(*), max(expires_at) - ` + Now + ` FROM ` + lt + `
WHERE owner <> '' GROUP BY owner ORDER BY owner`,
		Seeded: `SELECT EXISTS (SELECT 1 FROM ` + lt + `)`,
		Due: `SELECT count(*), coalesce(` + Now + ` - min(available_at), 0) FROM ` + t.Quoted() + `
WHERE processed_at IS NULL AND dead_at IS NULL AND available_at <= ` + Now,
		Next: `SELECT min(available_at) - ` + Now + ` FROM ` + t.Quoted() + `
WHERE processed_at IS NULL AND dead_at IS NULL`,
	}.Heartbeats()
}
