package sqlkit

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Marker is a driver's marks of claimed rows, run in the batch's transaction
// x: published rows by their keys (kept processed with keep), failures; both
// fenced by fence in ordered mode (nil otherwise).
type Marker interface {
	MarkPublished(ctx context.Context, x store.Execer, keys []Key, keep bool, fence *store.Fence) error
	MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error)
}

// Marks is the part of a store.Batch that every driver's batch shares: the
// claimed rows, their marks (the driver's Marker) in the marks' transaction
// (the claim's, or one begun at the first mark), and which rows the marks
// reached. A driver's batch embeds it and adds Commit and Close.
type Marks struct {
	marker Marker
	keep   bool
	fence  *store.Fence
	db     store.DB
	opts   *sql.TxOptions
	tx     Tx
	rows   []store.Row
	byID   map[string]int // index in rows
	// By row: tried, passed to a mark; done, by a mark that succeeded.
	tried, done []bool
	ended       bool
}

// Tx is the transaction marks are written in: a *sql.Tx.
type Tx interface {
	store.Execer
	Commit() error
	Rollback() error
}

// NewMarks returns the marks of a batch of rows claimed through db with p,
// written by marker. tx is the claim's transaction, or nil: the marks then
// begin one with opts at the first mark.
func NewMarks(marker Marker, p store.ClaimParams, db store.DB, opts *sql.TxOptions, tx Tx, rows []store.Row) *Marks {
	m := &Marks{marker: marker, keep: p.Keep, db: db, opts: opts, tx: tx, rows: rows, byID: make(map[string]int, len(rows)),
		tried: make([]bool, len(rows)), done: make([]bool, len(rows))}
	if p.Ordered != nil {
		m.fence = p.Ordered.Fence
	}
	for i, c := range rows {
		m.byID[c.ID] = i
	}
	return m
}

// Rows are the claimed rows.
func (m *Marks) Rows() []store.Row { return m.rows }

// MarkPublished marks the published rows ids (store.Batch.MarkPublished).
func (m *Marks) MarkPublished(ctx context.Context, ids []string) error {
	keys, err := m.keys(ids)
	if err != nil || len(keys) == 0 {
		return err
	}
	tx, err := m.Tx(ctx)
	if err != nil {
		return err
	}
	if err := m.marker.MarkPublished(ctx, tx, keys, m.keep, m.fence); err != nil {
		return err
	}
	m.marked(ids...)
	return nil
}

// MarkFailed marks the failures fs (store.Batch.MarkFailed).
func (m *Marks) MarkFailed(ctx context.Context, fs []store.Failure) (time.Time, error) {
	if err := m.failures(fs); err != nil {
		return time.Time{}, err
	}
	tx, err := m.Tx(ctx)
	if err != nil {
		return time.Time{}, err
	}
	at, err := m.marker.MarkFailed(ctx, tx, fs, m.fence)
	if err != nil {
		return at, err
	}
	for _, f := range fs {
		m.marked(f.ID)
	}
	return at, nil
}

// Tx returns the marks' transaction, beginning it if the claim had none.
func (m *Marks) Tx(ctx context.Context) (Tx, error) {
	if m.tx == nil {
		tx, err := m.db.BeginTx(ctx, m.opts)
		if err != nil {
			return nil, fmt.Errorf("begin marks: %w", err)
		}
		m.tx = tx
	}
	return m.tx, nil
}

// keys returns the keys of the claimed rows ids, recording them as tried, or
// an error naming an id the batch did not claim.
func (m *Marks) keys(ids []string) ([]Key, error) {
	keys := make([]Key, len(ids))
	for i, id := range ids {
		j, ok := m.byID[id]
		if !ok {
			return nil, fmt.Errorf("event %s is not in the batch", id)
		}
		c := m.rows[j]
		keys[i] = Key{ID: c.ID, Seq: c.Seq, Lease: c.Lease}
		m.tried[j] = true
	}
	return keys, nil
}

// failures sets each failure's Lease to the claim's lease on its row
// (store.Row.Lease), recording the rows as tried, or returns an error naming
// an id the batch did not claim.
func (m *Marks) failures(fs []store.Failure) error {
	for i, f := range fs {
		j, ok := m.byID[f.ID]
		if !ok {
			return fmt.Errorf("event %s is not in the batch", f.ID)
		}
		fs[i].Lease = m.rows[j].Lease
		m.tried[j] = true
	}
	return nil
}

// marked records that the marks of ids succeeded.
func (m *Marks) marked(ids ...string) {
	for _, id := range ids {
		if j, ok := m.byID[id]; ok {
			m.done[j] = true
		}
	}
}

// Savepoint runs f under a savepoint of the marks' transaction; when f fails
// the rows it marked count as unmarked again.
func (m *Marks) Savepoint(ctx context.Context, f func() error) error {
	tx, err := m.Tx(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", store.ErrTxLost, err)
	}
	before := slices.Clone(m.done)
	err = Savepoint(ctx, tx, "herald_marks", f)
	if err != nil {
		m.done = before
	}
	return err
}

// Untried returns the keys of the rows no mark was asked for (neither
// published nor failed: the batch had no time for them).
func (m *Marks) Untried() []Key {
	var out []Key
	for i, c := range m.rows {
		if !m.tried[i] {
			out = append(out, Key{ID: c.ID, Seq: c.Seq, Lease: c.Lease})
		}
	}
	return out
}

// Unrecorded reports whether a mark was asked for a row and did not succeed
// (a failure the database refused to record: the row stays pending).
func (m *Marks) Unrecorded() bool {
	for i, tried := range m.tried {
		if tried && !m.done[i] {
			return true
		}
	}
	return false
}

// Commit commits the marks' transaction, if there is one, and ends the marks.
func (m *Marks) Commit() error {
	m.ended = true
	if m.tx == nil {
		return nil
	}
	if err := m.tx.Commit(); err != nil {
		return fmt.Errorf("commit marks: %w", err)
	}
	return nil
}

// Close rolls back the marks' transaction unless Commit ended the marks, and
// reports whether it did (the batch ended without its marks).
func (m *Marks) Close() bool {
	if m.ended {
		return false
	}
	m.ended = true
	if m.tx != nil {
		_ = m.tx.Rollback()
	}
	return true
}
