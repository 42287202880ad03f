package postgres

import (
	"context"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// The WAL relay's side of the outbox in the log (store.WAL): logical
// decoding with pgoutput, its messages streamed from a replication slot
// through a publication. This file holds the checks the relay makes before
// it streams, the publication, the decoding of the messages and the
// statements on the outbox table it parks refused events in; wal_slot.go
// the slots, wal_marker.go the record of the slots, wal_stream.go the
// stream.

// wal is PostgreSQL's store.WAL.
type wal struct{}

var _ store.WAL = wal{}

// WAL returns the WAL relay's operations: PostgreSQL keeps an outbox in its
// log (store.Messages).
func (Driver) WAL() store.WAL { return wal{} }

// CheckDSN reports what is wrong with dsn (a URL or keyword/value string).
func (wal) CheckDSN(dsn string) error {
	_, err := pgconn.ParseConfig(dsn)
	return err
}

// CheckLevel returns store.ErrWALLevel (wrapped) unless wal_level is
// logical.
func (wal) CheckLevel(ctx context.Context, x store.Execer) error { return checkWALLevel(ctx, x) }

// ReplicationRight reports whether the session's role may stream a
// replication slot (REPLICATION, or a superuser).
func (wal) ReplicationRight(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := sqlkit.QueryRow(ctx, x, `SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`, nil, &ok)
	return ok, err
}

// EnsurePublication creates the publication name, with no tables (pgoutput
// sends logical messages whatever the tables), unless it exists. name must
// be a plain lowercase identifier.
func (wal) EnsurePublication(ctx context.Context, x store.Execer, name string) error {
	found, err := sqlkit.Found(ctx, x, `SELECT 1 FROM pg_publication WHERE pubname = $1`, name)
	if err != nil || found {
		return err
	}
	_, err = x.ExecContext(ctx, `CREATE PUBLICATION `+name)
	if err != nil && isDuplicate(err) { // created meanwhile
		return nil
	}
	return err
}

// DropPublication drops the publication name, unless it does not exist
// (dropped reports whether it did). name must be a plain lowercase
// identifier.
func (wal) DropPublication(ctx context.Context, x store.Execer, name string) (dropped bool, err error) {
	found, err := sqlkit.Found(ctx, x, `SELECT 1 FROM pg_publication WHERE pubname = $1`, name)
	if err != nil || !found {
		return false, err
	}
	if _, err := x.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+name); err != nil {
		return false, err
	}
	return true, nil
}

// Decode reads the outbox row of an event from its logical message's
// content: with fastRow when the content is exactly what EncodeMessage
// writes in the common case, several times faster (the decoding is most of
// the WAL relay's cost per event), else with MessageRow.
func (wal) Decode(content []byte) (store.Row, error) {
	if r, ok := fastRow(content); ok {
		return r, nil
	}
	return MessageRow(content)
}

// Parking returns the WAL relay's statements on the outbox table t: the
// table relay's mark of failures, which it reuses for the events it parks,
// and, in ordered mode, which aggregates have events in it not yet
// published or dead, whose later events it parks behind them.
func (wal) Parking(t ident.Table) store.Parking { return parking{t: t, r: newRelay(t)} }

type parking struct {
	t ident.Table
	r *relay
}

// MarkFailed is the table relay's MarkFailed, unfenced.
func (p parking) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure) error {
	_, err := p.r.MarkFailed(ctx, x, fs, nil)
	return err
}

// PendingAggregates returns the aggregates that have pending events
// (neither processed nor dead) in the table.
func (p parking) PendingAggregates(ctx context.Context, x store.Execer) ([]store.Aggregate, error) {
	rows, err := x.QueryContext(ctx, `SELECT DISTINCT aggregate_type, aggregate_id FROM `+p.t.Quoted()+`
WHERE processed_at IS NULL AND dead_at IS NULL AND aggregate_id <> ''`)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []store.Aggregate
	for rows.Next() {
		var a store.Aggregate
		if err := rows.Scan(&a.Type, &a.ID); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// AggregatePending reports whether the aggregate a has pending events
// (neither processed nor dead) in the table.
func (p parking) AggregatePending(ctx context.Context, x store.Execer, a store.Aggregate) (bool, error) {
	return sqlkit.Found(ctx, x, `SELECT 1 FROM `+p.t.Quoted()+`
WHERE aggregate_type = $1 AND aggregate_id = $2 AND processed_at IS NULL AND dead_at IS NULL LIMIT 1`, a.Type, a.ID)
}

// parseLSN reads pg_lsn text.
func parseLSN(s string) (store.LSN, error) {
	l, err := pglogrepl.ParseLSN(s)
	return store.LSN(l), err
}
