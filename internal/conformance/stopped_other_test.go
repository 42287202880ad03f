//go:build !linux

package conformance

import (
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

// testRelayStoppedProcessPastItsLease stops a process with SIGSTOP and reads
// its state in /proc: Linux only.
func testRelayStoppedProcessPastItsLease(t *testing.T, _ testkit.Dialect) {
	t.Skip("stops a helper process with SIGSTOP and reads /proc: Linux only")
}
