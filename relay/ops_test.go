package relay_test

// The relay's operations on the database (retention and cleanup, requeue,
// Stats, shutdown) are tested on every database by the conformance suite,
// internal/store/storetest; its configuration is tested here.

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/relay"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	bad := []relay.Config{
		{Table: "a.b.c"},
		{Table: "x; drop"},
		{Channel: "no-dash"},
		{BatchSize: -1},
		{MinBackoff: time.Minute, MaxBackoff: time.Second},
		{Ordered: true, PublishTimeout: 20 * time.Second, LeaseDuration: 30 * time.Second},
		{Retention: -time.Second},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
		if _, err := relay.New(nil, nil, c); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("New(%+v) = %v", c, err)
		}
	}
	if err := (relay.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	// 1+2+4+...+256 s, then 5 minutes capped: 511 s + 2×300 s.
	if h := (relay.Config{}).RetryHorizon(); h != 511*time.Second+600*time.Second {
		t.Fatalf("default retry horizon %v", h)
	}
	if h := (relay.Config{MaxAttempts: 3, MinBackoff: time.Second, MaxBackoff: time.Hour}).RetryHorizon(); h != 3*time.Second {
		t.Fatalf("retry horizon %v", h)
	}
}
