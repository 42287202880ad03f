package sqlite

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Leases() store.Leases { return r.leases }

type leases struct {
	t, rt string
}

func newLeases(t ident.Table) leases {
	return leases{t: t.Derived("_leases").Quoted(), rt: t.Derived("_relays").Quoted()}
}

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	_, err := x.ExecContext(ctx, `WITH RECURSIVE p(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM p WHERE i + 1 < ?)
INSERT INTO `+l.t+` (partition) SELECT i FROM p WHERE true ON CONFLICT DO NOTHING`, n)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+l.rt+` (instance, seen_at) VALUES (?, `+Now+`)
ON CONFLICT (instance) DO UPDATE SET seen_at = excluded.seen_at`, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	n, err := sqlkit.Column[int](ctx, x, `SELECT count(*) FROM `+l.rt+` WHERE seen_at > `+Now+` - ?`, within.Microseconds())
	if err != nil || len(n) == 0 {
		return 0, err
	}
	return n[0], nil
}

func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	return sqlkit.Collect(ctx, x, `UPDATE `+l.t+` SET expires_at = `+Now+` + ? WHERE owner = ? AND expires_at > `+Now+` RETURNING partition, generation`,
		[]any{lease.Microseconds(), instance}, sqlkit.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	if len(parts) == 0 {
		return nil
	}
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = 0 WHERE owner = ? AND partition IN (`+sqlkit.Placeholders(len(parts))+`)`,
		append([]any{instance}, sqlkit.Anys(parts)...)...)
	return err
}

func (l leases) Acquire(ctx context.Context, db store.DB, p store.AcquireParams) ([]store.Lease, error) {
	return sqlkit.Collect(ctx, db, `UPDATE `+l.t+` SET owner = ?, expires_at = `+Now+` + ?, generation = generation + 1
WHERE partition IN (SELECT partition FROM `+l.t+` WHERE expires_at <= `+Now+` AND partition < ? ORDER BY partition LIMIT ?)
RETURNING partition, generation`, []any{p.Instance, p.Lease.Microseconds(), p.Partitions, p.Limit}, sqlkit.ScanLease)
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = 0 WHERE owner = ?`, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `DELETE FROM `+l.rt+` WHERE instance = ?`, instance)
	return err
}
