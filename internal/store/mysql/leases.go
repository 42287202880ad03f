package mysql

import (
	"context"
	"strings"
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
	return leases{t: Quote(t.Derived("_leases")), rt: Quote(t.Derived("_relays"))}
}

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	vals := make([]string, n)
	args := make([]any, n)
	for i := range n {
		vals[i], args[i] = "(?)", i
	}
	_, err := x.ExecContext(ctx, "INSERT INTO "+l.t+" (`partition`) VALUES "+strings.Join(vals, ", ")+
		" ON DUPLICATE KEY UPDATE `partition` = `partition`", args...)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+l.rt+` (instance, seen_at) VALUES (?, `+Now+`)
ON DUPLICATE KEY UPDATE seen_at = `+Now, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	var n int
	err := sqlkit.QueryRow(ctx, x, `SELECT COUNT(*) FROM `+l.rt+` WHERE seen_at > `+Now+` - INTERVAL ? MICROSECOND`, []any{within.Microseconds()}, &n)
	return n, err
}

// Renew extends the unexpired leases, then reads them back (no RETURNING).
func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	if _, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET expires_at = `+Now+` + INTERVAL ? MICROSECOND WHERE owner = ? AND expires_at > `+Now,
		lease.Microseconds(), instance); err != nil {
		return nil, err
	}
	return sqlkit.Collect(ctx, x, "SELECT `partition`, generation FROM "+l.t+" WHERE owner = ? AND expires_at > "+Now, []any{instance}, sqlkit.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	if len(parts) == 0 {
		return nil
	}
	_, err := x.ExecContext(ctx, "UPDATE "+l.t+" SET owner = '', expires_at = '1970-01-01 00:00:00' WHERE owner = ? AND `partition` IN ("+sqlkit.Placeholders(len(parts))+")",
		append([]any{instance}, sqlkit.Anys(parts)...)...)
	return err
}

// Acquire locks expired partitions (skipping those another instance is
// taking) and takes them, in one READ COMMITTED transaction (no RETURNING, and
// no UPDATE with a subquery on the table it updates).
func (l leases) Acquire(ctx context.Context, db store.DB, p store.AcquireParams) ([]store.Lease, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	got, err := sqlkit.Column[int](ctx, tx, "SELECT `partition` FROM "+l.t+" WHERE expires_at <= "+Now+" AND `partition` < ? ORDER BY `partition` LIMIT ? FOR UPDATE SKIP LOCKED",
		p.Partitions, p.Limit)
	if err != nil || len(got) == 0 {
		return nil, err
	}
	in := "`partition` IN (" + sqlkit.Placeholders(len(got)) + ")"
	if _, err := tx.ExecContext(ctx, "UPDATE "+l.t+" SET owner = ?, expires_at = "+Now+" + INTERVAL ? MICROSECOND, generation = generation + 1 WHERE "+in,
		append([]any{p.Instance, p.Lease.Microseconds()}, sqlkit.Anys(got)...)...); err != nil {
		return nil, err
	}
	out, err := sqlkit.Collect(ctx, tx, "SELECT `partition`, generation FROM "+l.t+" WHERE "+in, sqlkit.Anys(got), sqlkit.ScanLease)
	if err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = '1970-01-01 00:00:00' WHERE owner = ?`, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `DELETE FROM `+l.rt+` WHERE instance = ?`, instance)
	return err
}
