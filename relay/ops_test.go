package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/relay"
)

// With a retention, published events are stamped, not deleted; the cleaner
// removes them once older than the retention.
func TestRetentionAndCleanup(t *testing.T) {
	e := newEnv(t)
	e.write(5, 2)
	gc := newGoChannel()
	got := consume(t, gc, "account.deposited")
	r, err := relay.New(e.db, gc, relay.Config{Retention: 300 * time.Millisecond, CleanupInterval: time.Hour,
		CleanupBatch: 3, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	eventually(t, 10*time.Second, "10 events", func() bool { return got.distinct() == 10 })
	eventually(t, 5*time.Second, "nothing pending", func() bool { return e.pending() == 0 })
	var kept int64
	e.db.Raw(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`).Scan(&kept)
	if kept != 10 {
		t.Fatalf("%d processed rows kept, want 10", kept)
	}
	if n, err := r.Cleanup(context.Background()); err != nil || n != 0 {
		t.Fatalf("cleanup before the retention deleted %d, %v", n, err)
	}
	time.Sleep(400 * time.Millisecond)
	if n, err := r.Cleanup(context.Background()); err != nil || n != 10 {
		t.Fatalf("cleanup deleted %d, %v; want 10 (in batches of 3)", n, err)
	}
	e.db.Raw(`SELECT count(*) FROM outbox_messages`).Scan(&kept)
	if kept != 0 {
		t.Fatalf("%d rows left", kept)
	}
}

type hangingPublisher struct{}

func (hangingPublisher) Publish(string, ...*message.Message) error { select {} }
func (hangingPublisher) Close() error                              { return nil }

// Cancelling Run with a publisher that never returns: Run returns within a
// bounded time, and the batch's rows are released (still pending).
func TestShutdownIsBounded(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			e.write(3, 1)
			r, err := relay.New(e.db, hangingPublisher{}, relay.Config{Ordered: ordered, PublishTimeout: 300 * time.Millisecond,
				LeaseDuration: time.Second, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			time.Sleep(500 * time.Millisecond)
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of cancel")
			}
			t.Logf("Run returned %v after cancel", time.Since(start).Round(time.Millisecond))
			if e.pending() != 3 {
				t.Fatalf("%d pending, want 3", e.pending())
			}
		})
	}
}

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
