package postgres

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Leases() store.Leases { return r.leases }

type leases struct {
	seed, heartbeat, live, renew, release, acquire, releaseAll, leave string
	pos                                                               *position // the relay's, forgotten when partitions are taken
}

func newLeases(t ident.Table, pos *position) leases {
	lt, rt := t.Derived("_leases").Quoted(), t.Derived("_relays").Quoted()
	return leases{
		pos:  pos,
		seed: `INSERT INTO ` + lt + ` (partition) SELECT generate_series(0, $1 - 1) ON CONFLICT DO NOTHING`,
		heartbeat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES ($1, now())
ON CONFLICT (instance) DO UPDATE SET seen_at = now()`,
		live: `SELECT count(*) FROM ` + rt + ` WHERE seen_at > now() - $1::float8 * interval '1 millisecond'`,
		renew: `UPDATE ` + lt + ` SET expires_at = now() + $2::float8 * interval '1 millisecond'
WHERE owner = $1 AND expires_at > now() RETURNING partition, generation`,
		release: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1 AND partition = ANY($2::int[])`,
		acquire: `UPDATE ` + lt + ` SET owner = $1, expires_at = now() + $2::float8 * interval '1 millisecond', generation = generation + 1
WHERE partition IN (SELECT partition FROM ` + lt + ` WHERE expires_at <= now() AND partition < $4
  ORDER BY partition LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING partition, generation`,
		releaseAll: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1`,
		leave:      `DELETE FROM ` + rt + ` WHERE instance = $1`,
	}
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	_, err := x.ExecContext(ctx, l.seed, n)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.heartbeat, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	var n int
	err := sqlkit.QueryRow(ctx, x, l.live, []any{ms(within)}, &n)
	return n, err
}

func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	return sqlkit.Collect(ctx, x, l.renew, []any{instance, ms(lease)}, sqlkit.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	_, err := x.ExecContext(ctx, l.release, instance, parts)
	return err
}

// Acquire takes expired partitions; when it took any, the claims start at the
// head again (their previous owner may have left events below where this
// instance last claimed them).
func (l leases) Acquire(ctx context.Context, db store.DB, p store.AcquireParams) ([]store.Lease, error) {
	got, err := sqlkit.Collect(ctx, db, l.acquire, []any{p.Instance, ms(p.Lease), p.Limit, p.Partitions}, sqlkit.ScanLease)
	if len(got) > 0 {
		l.pos.rewind()
	}
	return got, err
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.releaseAll, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.leave, instance)
	return err
}
