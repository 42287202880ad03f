package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Retention by partition drop (store.Partitions).

// CreatePartitioned creates the outbox partitioned by occurred_at when
// missing (the partitioned set: its 0001, and the later migrations' changes
// to the outbox).
func (r *relay) CreatePartitioned(ctx context.Context, x store.Execer) error {
	return partitionedSchema.CreateOutbox(ctx, x, r.t)
}

// Partitioned reports whether the outbox is a partitioned table.
func (r *relay) Partitioned(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := sqlkit.QueryRow(ctx, x, `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`,
		[]any{r.t.Quoted()}, &ok)
	return ok, err
}

// CleanupDefault deletes a batch of the default partition's published events
// past the retention, as Cleanup does on a plain outbox.
func (r *relay) CleanupDefault(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.cleanup:", r.t, r.q().cleanupDefault, float64(olderThan.Milliseconds()), limit)
}

// partitionLockTimeout bounds the wait for the table lock a partition's
// creation or drop takes: writers and claims queue behind it meanwhile.
const partitionLockTimeout = 200 * time.Millisecond

// partitionHoldTimeout bounds how long the partition DDL's transaction may
// hold the outbox's strong lock without working: a relay process stopped
// (SIGSTOP, a VM freeze) or starved of CPU between its statements, the lock
// held, stops every writer; the server ends the session after this long
// idle in the transaction (idle_in_transaction_session_timeout), or a
// statement after this long (statement_timeout), and the lock is released.
const partitionHoldTimeout = 500 * time.Millisecond

func (r *relay) MaintainPartitions(ctx context.Context, db *sql.DB, interval, olderThan time.Duration) (created, dropped int, err error) {
	var now time.Time
	if err := sqlkit.QueryRow(ctx, db, `SELECT now()`, nil, &now); err != nil {
		return 0, 0, err
	}
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	// ends keeps the error of a partition's creation or drop (what), and
	// says whether the round ends there: another relay maintains them
	// (errPartitionsBusy, no error), or the outbox is contended.
	ends := func(what string, e error) bool {
		if errors.Is(e, errPartitionsBusy) {
			return true
		}
		keep(fmt.Errorf("%s: %w", what, e))
		return lockContended(e)
	}
	base := now.Truncate(interval)
	for k := -1; k <= 2; k++ {
		start := base.Add(time.Duration(k) * interval)
		name := r.t.Partition(start)
		ok, e := exists(ctx, db, name.Quoted())
		if e != nil {
			keep(e)
			continue
		}
		if ok {
			continue
		}
		// Fails while the default partition holds events of this range
		// (an application clock far ahead): they are cleaned there, row by
		// row, and the range is created once they are gone. Fails too when
		// the outbox's lock is not had within partitionLockTimeout (a
		// reader holds the table): retried at the next round.
		if e := r.createPartition(ctx, db, name, start, start.Add(interval)); e != nil {
			if ends("create partition "+name.String(), e) {
				return created, dropped, err
			}
			continue
		}
		created++
	}
	// The range partitions, with the upper bounds of their ranges.
	type part struct {
		name string
		upto sql.NullTime
	}
	parts, e := sqlkit.Collect(ctx, db, `SELECT c.oid::regclass::text,
  (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'`, []any{r.t.Quoted()},
		func(rows *sql.Rows) (part, error) {
			var p part
			err := rows.Scan(&p.name, &p.upto)
			return p, err
		})
	if e != nil {
		keep(e)
		return created, dropped, err
	}
	for _, p := range parts {
		if !p.upto.Valid || !p.upto.Time.Before(now.Add(-olderThan)) {
			continue
		}
		ok, e := r.dropPartition(ctx, db, p.name, olderThan)
		if e != nil {
			if ends("drop partition "+p.name, e) {
				return created, dropped, err
			}
			continue
		}
		if ok {
			dropped++
		}
	}
	return created, dropped, err
}

// errPartitionsBusy is lockTimeoutTx's answer while another relay's
// partition DDL on the same outbox is under way: this round ends, and that
// relay maintains the partitions.
var errPartitionsBusy = errors.New("another relay is maintaining the partitions")

// lockTimeoutTx begins a transaction for partition DDL on the outbox t,
// whose lock waits give up after partitionLockTimeout: DDL that takes a
// strong lock of the outbox at run time queues behind any reader of the
// table (a pg_dump), and every writer queues behind it meanwhile, so it
// waits briefly and is tried again later. Once it has the lock, the server
// ends it after partitionHoldTimeout idle or in one statement: a stopped
// relay never holds the writers back longer. It holds the advisory lock of
// t's partitions to its end, or returns errPartitionsBusy when another
// relay does: at most one relay's DDL waits in the outbox's lock queue at a
// time, so the saves never wait behind several relays' waits in a row.
func lockTimeoutTx(ctx context.Context, db *sql.DB, t ident.Table) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	var alone bool
	var lockTimeout, idleTimeout, statementTimeout string
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT set_config('lock_timeout', '%dms', true),
  set_config('idle_in_transaction_session_timeout', '%[2]dms', true), set_config('statement_timeout', '%[2]dms', true),
  pg_try_advisory_xact_lock(hashtext('herald.partitions:' || $1::regclass::oid::text))`,
		partitionLockTimeout.Milliseconds(), partitionHoldTimeout.Milliseconds()), t.Quoted()).Scan(&lockTimeout, &idleTimeout, &statementTimeout, &alone); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	if !alone {
		_ = tx.Rollback()
		return nil, errPartitionsBusy
	}
	return tx, nil
}

// createPartition creates the partition name for the range [from, to),
// waiting at most partitionLockTimeout for the outbox's ACCESS EXCLUSIVE
// lock that CREATE TABLE ... PARTITION OF takes.
func (r *relay) createPartition(ctx context.Context, db *sql.DB, name ident.Table, from, to time.Time) error {
	tx, err := lockTimeoutTx(ctx, db, r.t)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+name.Quoted()+` PARTITION OF `+r.t.Quoted()+
		` FOR VALUES FROM (`+quoteLiteral(from.UTC().Format(time.RFC3339Nano))+`) TO (`+
		quoteLiteral(to.UTC().Format(time.RFC3339Nano))+`)`); err != nil {
		return err
	}
	return tx.Commit()
}

// dropPartition drops the partition (its name as regclass text) if it holds
// no pending or dead event and none published within olderThan: in one
// transaction, under an ACCESS EXCLUSIVE lock of the whole outbox (so that no
// event can be written to it or made pending between the look and the drop),
// which it waits for at most partitionLockTimeout.
func (r *relay) dropPartition(ctx context.Context, db *sql.DB, name string, olderThan time.Duration) (bool, error) {
	tx, err := lockTimeoutTx(ctx, db, r.t)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE `+r.t.Quoted()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return false, err
	}
	// Each test has its index: pending, dead, processed.
	var busy bool
	if err := sqlkit.QueryRow(ctx, tx, `SELECT EXISTS (SELECT 1 FROM `+name+` WHERE processed_at IS NULL AND dead_at IS NULL)
  OR EXISTS (SELECT 1 FROM `+name+` WHERE dead_at IS NOT NULL)
  OR EXISTS (SELECT 1 FROM `+name+` WHERE processed_at >= now() - $1::float8 * interval '1 millisecond')`,
		[]any{float64(olderThan.Milliseconds())}, &busy); err != nil {
		return false, err
	}
	if busy {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE `+name); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
