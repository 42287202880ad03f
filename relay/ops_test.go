package relay_test

// The relay's operations on the database (retention and cleanup, requeue,
// Stats, shutdown) are tested on every database by the conformance suite,
// internal/conformance; its configuration is tested here.

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
		// Its partitions' names would pass PostgreSQL's 63 bytes.
		{Table: strings.Repeat("t", 47), DropPartitions: true, Retention: time.Hour, PartitionInterval: time.Minute},
		{Table: "app." + strings.Repeat("t", 49), DropPartitions: true, Retention: time.Hour},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
		if _, err := relay.New(nil, nil, c); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("New(%+v) = %v", c, err)
		}
	}
	for _, good := range []relay.Config{
		{},
		{Table: strings.Repeat("t", 46), DropPartitions: true, Retention: time.Hour, PartitionInterval: time.Second},
		{Table: strings.Repeat("t", 49)}, // not partitioned: its longest derived name is 63 bytes
	} {
		if err := good.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// 1+2+4+...+256 s, then 5 minutes capped: 511 s + 2×300 s.
	if h := (relay.Config{}).RetryHorizon(); h != 511*time.Second+600*time.Second {
		t.Fatalf("default retry horizon %v", h)
	}
	if h := (relay.Config{MaxAttempts: 3, MinBackoff: time.Second, MaxBackoff: time.Hour}).RetryHorizon(); h != 3*time.Second {
		t.Fatalf("retry horizon %v", h)
	}
}
