package outbound

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done; it reports whether the wait completed.
// Both relays wait with it between attempts.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
