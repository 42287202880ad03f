package store

import (
	"context"
	"errors"
	"time"
)

// ClaimParams says what Relay.Claim claims.
type ClaimParams struct {
	// Limit is the most events the batch holds.
	Limit int
	// Hold is how long the batch may keep its rows from other claims: a
	// driver that leases rows (no row locks) leases them this long, one that
	// locks them holds its transaction no longer (ctx's deadline).
	Hold time.Duration
	// Keep: published events are stamped processed (retention) instead of
	// deleted.
	Keep bool
	// FromHead claims from the head of the pending index, leaving the
	// remembered position alone (the sweep of a driver with Position).
	FromHead bool
	// Ordered, when set, claims in ordered mode: the due events of the owned
	// partitions in insertion order, leaving out those behind an earlier
	// event of their aggregate that waits for a retry; nothing is locked
	// (only the partitions' owner reads them), and the marks are fenced.
	Ordered *OrderedClaim
}

// OrderedClaim is the ordered mode of a claim.
type OrderedClaim struct {
	// Partitions is the number of ordering partitions; Owned those the
	// claim reads.
	Partitions int
	Owned      []int32
	// Fence fences the batch's marks (see Fence).
	Fence *Fence
}

// Batch is a claimed batch: its rows and the marks that settle it, written in
// one transaction (the claim's own where it locked its rows, else one begun at
// the first mark) and committed by Commit. The driver learns from it what to
// do with the rows it did not mark and with its claim position.
type Batch interface {
	// Rows are the claimed events, in the order to publish them.
	Rows() []Row
	// MarkPublished deletes the published events ids (or, with
	// ClaimParams.Keep, stamps them processed); a fenced batch marks only
	// the rows of partitions still held, and returns ErrLeaseLost when one
	// was lost.
	MarkPublished(ctx context.Context, ids []string) error
	// MarkFailed records failures and returns the database's time of the
	// marks, fenced as MarkPublished is.
	MarkFailed(ctx context.Context, fs []Failure) (time.Time, error)
	// Savepoint runs f under a savepoint of the marks' transaction: when f
	// fails, its marks are undone (ErrTxLost when the transaction is lost).
	Savepoint(ctx context.Context, f func() error) error
	// Commit commits the marks and ends the batch: the rows that were
	// neither marked published nor failed are due again (a lease released;
	// row locks end with the transaction), and the driver keeps or forgets
	// its claim position by what the batch marked.
	Commit(ctx context.Context) error
	// Close ends a batch that Commit did not: its marks are rolled back and
	// its rows are due again (the claim position, if any, forgotten). After
	// Commit it does nothing.
	Close()
}

// ErrTxLost is returned (wrapped) by Batch.Savepoint when the savepoint could
// not be set, released or rolled back to: the transaction is no longer
// usable.
var ErrTxLost = errors.New("transaction lost")
