package sqlkit

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/store"
)

func TestFenceJSON(t *testing.T) {
	f := &store.Fence{Leases: []store.Lease{{Partition: 3, Generation: 7}, {Partition: 0, Generation: 9007199254740993}}}
	if got := FenceJSON(f); got != "[[3,7],[0,9007199254740993]]" {
		t.Fatalf("FenceJSON = %q", got)
	}
	if got := FenceJSON(&store.Fence{}); got != "[]" {
		t.Fatalf("empty FenceJSON = %q", got)
	}
	parts, gens := FenceParts(f)
	if len(parts) != 2 || parts[0] != 3 || gens[1] != 9007199254740993 {
		t.Fatalf("FenceParts = %v, %v", parts, gens)
	}
	if err := CheckFence(f, 1); !errors.Is(err, store.ErrLeaseLost) || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("CheckFence with a lease lost: %v", err)
	}
	if err := CheckFence(f, 2); err != nil {
		t.Fatalf("CheckFence with every lease held: %v", err)
	}
}
