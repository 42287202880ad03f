package sqlkit

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// NoWaker is the store.Waker of a database without store.Listen: its methods
// return store.ErrNotSupported.
type NoWaker struct{}

// Listen returns store.ErrNotSupported.
func (NoWaker) Listen(context.Context, *sql.DB, string, func(string)) error {
	return fmt.Errorf("listen: %w", store.ErrNotSupported)
}

// Notify returns store.ErrNotSupported.
func (NoWaker) Notify(context.Context, *sql.DB, string, ...string) error {
	return fmt.Errorf("notify: %w", store.ErrNotSupported)
}

// Unpositioned is embedded by the store.Relay of a database without
// store.Position or store.Partitions: its methods say so.
type Unpositioned struct{}

// Sweep returns store.ErrNotSupported (no store.Position).
func (Unpositioned) Sweep(context.Context, store.Execer, int, []int32) (int, error) {
	return 0, fmt.Errorf("sweep: %w", store.ErrNotSupported)
}

// CreatePartitioned returns store.ErrNotSupported (no store.Partitions).
func (Unpositioned) CreatePartitioned(context.Context, store.Execer) error {
	return fmt.Errorf("partitions: %w", store.ErrNotSupported)
}

// Partitioned returns false (no store.Partitions).
func (Unpositioned) Partitioned(context.Context, store.Execer) (bool, error) { return false, nil }

// MaintainPartitions returns store.ErrNotSupported (no store.Partitions).
func (Unpositioned) MaintainPartitions(context.Context, *sql.DB, time.Duration, time.Duration) (int, int, error) {
	return 0, 0, fmt.Errorf("partitions: %w", store.ErrNotSupported)
}

// CleanupDefault returns store.ErrNotSupported (no store.Partitions).
func (Unpositioned) CleanupDefault(context.Context, *sql.DB, time.Duration, int) (int64, error) {
	return 0, fmt.Errorf("partitions: %w", store.ErrNotSupported)
}
