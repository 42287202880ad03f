package sqlkit

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// scanInstance reads an instance row: its name, then its age in microseconds.
func scanInstance(rows interface{ Scan(...any) error }) (store.InstanceSeen, error) {
	var s store.InstanceSeen
	var us int64
	err := rows.Scan(&s.Instance, &us)
	s.Ago = time.Duration(us) * time.Microsecond
	return s, err
}

// scanLeaseOwner reads a lease owner row: the owner, its partitions, then
// the time left on its latest lease in microseconds.
func scanLeaseOwner(rows interface{ Scan(...any) error }) (store.LeaseOwner, error) {
	var o store.LeaseOwner
	var us int64
	err := rows.Scan(&o.Owner, &o.Partitions, &us)
	o.Left = time.Duration(us) * time.Microsecond
	return o, err
}

// HeartbeatSQL is one database's statements for Heartbeats, which it
// implements: a driver gives its SQL, the calls are the same everywhere.
// Durations are read as microseconds.
type HeartbeatSQL struct {
	// Exists reports whether the relays table exists; Create runs only when
	// it does not, so that a role without the right to create tables (which
	// CREATE TABLE IF NOT EXISTS needs even when the table exists, on
	// PostgreSQL and MySQL) works against the table the migrations made.
	// Nil: Create always runs.
	Exists    func(ctx context.Context, x store.Execer) (bool, error)
	Create    string // makes the relays table when missing
	Beat      string // upserts one instance's row, seen now: $1/? the instance
	Prune     string // deletes rows not seen for $1/? microseconds
	Instances string // instance, microseconds since seen; newest first
	Leases    string // owner, partitions, microseconds its latest lease has left
	Seeded    string // whether the lease table has a row (an ordered relay ran)
	Due       string // due events, microseconds the oldest has been due
	Next      string // microseconds until the earliest pending event is due; NULL: none
	// OneOff is an argument put first in the statement of Nexts, whose text
	// names the outboxes it asks and so is seldom the same twice, that
	// keeps the driver from preparing and keeping it (pgx's statement cache
	// keeps 512 a connection; on PostgreSQL one statement over 100 outboxes
	// holds about 2.7 MB of the server's memory while kept). Nil: none.
	OneOff any
}

type heartbeatSQL struct{ q HeartbeatSQL }

// Heartbeats returns the Heartbeats that run q.
func (q HeartbeatSQL) Heartbeats() store.Heartbeats { return heartbeatSQL{q} }

func (h heartbeatSQL) Create(ctx context.Context, x store.Execer) error {
	if h.q.Exists != nil {
		ok, err := h.q.Exists(ctx, x)
		if err != nil {
			return fmt.Errorf("look up the relays table: %w", err)
		}
		if ok {
			return nil
		}
	}
	_, err := x.ExecContext(ctx, h.q.Create)
	return err
}

func (h heartbeatSQL) Beat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, h.q.Beat, instance)
	return err
}

func (h heartbeatSQL) Prune(ctx context.Context, x store.Execer, olderThan time.Duration) error {
	_, err := x.ExecContext(ctx, h.q.Prune, olderThan.Microseconds())
	return err
}

func (h heartbeatSQL) Instances(ctx context.Context, x store.Execer) ([]store.InstanceSeen, error) {
	return Collect(ctx, x, h.q.Instances, nil, func(rows *sql.Rows) (store.InstanceSeen, error) { return scanInstance(rows) })
}

func (h heartbeatSQL) Leases(ctx context.Context, x store.Execer) ([]store.LeaseOwner, error) {
	return Collect(ctx, x, h.q.Leases, nil, func(rows *sql.Rows) (store.LeaseOwner, error) { return scanLeaseOwner(rows) })
}

func (h heartbeatSQL) Seeded(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := QueryRow(ctx, x, h.q.Seeded, nil, &ok)
	return ok, err
}

func (h heartbeatSQL) Due(ctx context.Context, x store.Execer) (int64, time.Duration, error) {
	var n, us int64
	err := QueryRow(ctx, x, h.q.Due, nil, &n, &us)
	return n, time.Duration(us) * time.Microsecond, err
}

func (h heartbeatSQL) Next(ctx context.Context, x store.Execer) (time.Duration, bool, error) {
	var us sql.NullInt64
	if err := QueryRow(ctx, x, h.q.Next, nil, &us); err != nil {
		return 0, false, err
	}
	return time.Duration(us.Int64) * time.Microsecond, us.Valid, nil
}

// Next is what Heartbeats.Next returns of one outbox.
type Next struct {
	Wait time.Duration
	OK   bool
}

// Nexts asks the outboxes of hbs, all on x's database, what Heartbeats.Next
// asks each, in one statement: their statements as the columns of one row.
// Every Heartbeats must be one of this package's (HeartbeatSQL); one
// outbox's error (its table gone) fails the whole statement.
func Nexts(ctx context.Context, x store.Execer, hbs []store.Heartbeats) ([]Next, error) {
	cols := make([]string, len(hbs))
	var args []any
	for i, hb := range hbs {
		h, ok := hb.(heartbeatSQL)
		if !ok {
			return nil, fmt.Errorf("sqlkit: Nexts of a %T", hb)
		}
		cols[i] = "(" + h.q.Next + ")"
		if i == 0 && h.q.OneOff != nil {
			args = []any{h.q.OneOff}
		}
	}
	us := make([]sql.NullInt64, len(hbs))
	dest := make([]any, len(hbs))
	for i := range us {
		dest[i] = &us[i]
	}
	if err := QueryRow(ctx, x, "SELECT "+strings.Join(cols, ", "), args, dest...); err != nil {
		return nil, err
	}
	out := make([]Next, len(hbs))
	for i, u := range us {
		out[i] = Next{Wait: time.Duration(u.Int64) * time.Microsecond, OK: u.Valid}
	}
	return out, nil
}
