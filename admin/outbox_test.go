package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
)

var ctx = context.Background()

// The figures per topic and in total: pending, failing (a failed attempt),
// dead, the oldest pending age; published in the last minute only when the
// table keeps published rows; healthy only with nothing dead and nothing
// older than MaxAge.
func TestStatus(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		s, err := o.Status(ctx)
		testkit.Must(t, err)
		if !s.Healthy || len(s.Topics) != 0 || s.Total != (admin.Figures{}) || s.RetainsPublished || s.Table != "outbox_messages" || s.Database != d.Name {
			t.Fatalf("empty outbox: %+v", s)
		}

		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, PaymentTaken{OrderID: "1"}, PaymentTaken{OrderID: "2"})
		e.fail(ids[1])
		e.kill(ids[2], time.Minute, "broker refused")
		e.kill(ids[4], time.Minute, "broker refused")
		e.stamp(ids[0], "created_at", 10*time.Minute)
		s, err = o.Status(ctx)
		testkit.Must(t, err)
		if len(s.Topics) != 2 {
			t.Fatalf("topics %+v", s.Topics)
		}
		orders, payments := s.Topics[0], s.Topics[1]
		if orders.Topic != "orders" || orders.Pending != 2 || orders.Failing != 1 || orders.Dead != 1 ||
			orders.OldestPending() < 10*time.Minute || orders.OldestPending() > 11*time.Minute || orders.PublishedLastMinute != nil {
			t.Fatalf("orders %+v", orders)
		}
		if payments.Topic != "payments" || payments.Pending != 1 || payments.Failing != 0 || payments.Dead != 1 ||
			payments.OldestPending() < 0 || payments.OldestPending() > time.Minute {
			t.Fatalf("payments %+v", payments)
		}
		if s.Total.Pending != 3 || s.Total.Failing != 1 || s.Total.Dead != 2 || s.Total.OldestPendingSeconds != orders.OldestPendingSeconds {
			t.Fatalf("total %+v", s.Total)
		}
		if s.Healthy || len(s.Problems) != 2 || s.Problems[0] != "2 dead events" || !strings.Contains(s.Problems[1], "over 5m0s") {
			t.Fatalf("problems %q", s.Problems)
		}
		// MaxAge negative: the age is no problem.
		s, err = e.open(admin.Config{MaxAge: -1}).Status(ctx)
		testkit.Must(t, err)
		if len(s.Problems) != 1 {
			t.Fatalf("problems with MaxAge off: %q", s.Problems)
		}

		// A retention keeps published rows: published within the last minute
		// counts, earlier does not; the published rows are not pending.
		e.stamp(ids[0], "processed_at", 10*time.Second)
		e.stamp(ids[3], "processed_at", 2*time.Minute)
		s, err = o.Status(ctx)
		testkit.Must(t, err)
		orders, payments = s.Topics[0], s.Topics[1]
		if !s.RetainsPublished || orders.PublishedLastMinute == nil || *orders.PublishedLastMinute != 1 ||
			payments.PublishedLastMinute == nil || *payments.PublishedLastMinute != 0 || *s.Total.PublishedLastMinute != 1 {
			t.Fatalf("published: %+v", s)
		}
		if orders.Pending != 1 || payments.Pending != 0 || s.Total.Pending != 1 || orders.OldestPending() > time.Minute {
			t.Fatalf("pending after publishing: %+v", s)
		}

		// The JSON says the same, with null for what cannot be told.
		b, err := json.Marshal(admin.Status{Topics: []admin.Figures{{Topic: "x"}}})
		testkit.Must(t, err)
		if !strings.Contains(string(b), `"published_last_minute":null`) {
			t.Fatalf("json %s", b)
		}
	})
}

// Dead events are listed oldest death first, filtered by type, age and id,
// without payloads; one has its payload and metadata; an id that is not dead
// is ErrNotDead.
func TestDead(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"}, OrderPlaced{OrderID: "3"}, OrderPlaced{OrderID: "4"})
		e.kill(ids[0], time.Hour, "old failure")
		e.kill(ids[1], time.Minute, "payment refused")
		e.kill(ids[2], 2*time.Hour, "oldest failure\nsecond line")

		all, err := o.Dead(ctx, admin.DeadFilter{}, 10)
		testkit.Must(t, err)
		if got := deadIDs(all); got != join(ids[2], ids[0], ids[1]) {
			t.Fatalf("dead %s", got)
		}
		first := all[0]
		if first.Type != "order.placed" || first.Topic != "orders" || first.Attempts != 12 || first.Strikes != 11 ||
			first.LastError != "oldest failure\nsecond line" || time.Since(first.DeadAt) < 119*time.Minute || first.Payload != nil {
			t.Fatalf("first dead %+v", first)
		}
		for f, want := range map[*admin.DeadFilter]string{
			{Type: "order.placed"}:                               join(ids[2], ids[0]),
			{OlderThan: 30 * time.Minute}:                        join(ids[2], ids[0]),
			{Type: "payment.taken", OlderThan: time.Hour}:        "",
			{IDs: []uuid.UUID{ids[1], ids[3]}}:                   join(ids[1]),
			{IDs: []uuid.UUID{ids[0]}, Type: "order.placed"}:     join(ids[0]),
			{IDs: []uuid.UUID{ids[0]}, OlderThan: 3 * time.Hour}: "",
		} {
			got, err := o.Dead(ctx, *f, 10)
			testkit.Must(t, err)
			if deadIDs(got) != want {
				t.Fatalf("dead %+v: %s, want %s", *f, deadIDs(got), want)
			}
		}
		if got, _ := o.Dead(ctx, admin.DeadFilter{}, 1); len(got) != 1 {
			t.Fatalf("limit 1: %d", len(got))
		}

		one, err := o.DeadEvent(ctx, ids[1])
		testkit.Must(t, err)
		if one.ID != ids[1].String() || one.Type != "payment.taken" || one.LastError != "payment refused" ||
			string(one.Payload) != `{"OrderID":"2"}` || !strings.Contains(string(one.Metadata), `"tenant":"acme"`) {
			t.Fatalf("dead event %+v, payload %s, metadata %s", one, one.Payload, one.Metadata)
		}
		for _, id := range []uuid.UUID{ids[3], uuid.New()} {
			if _, err := o.DeadEvent(ctx, id); !errors.Is(err, admin.ErrNotDead) {
				t.Fatalf("DeadEvent(%s) = %v, want ErrNotDead", id, err)
			}
		}
	})
}

// Requeue by ids is all or nothing; by type takes that type only; all takes
// every dead event. Requeued events are pending, attempts and strikes reset.
func TestRequeue(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		woken := 0
		o := e.open(admin.Config{Wake: func() { woken++ }})
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"}, PaymentTaken{OrderID: "4"}, OrderPlaced{OrderID: "5"})
		for _, id := range ids[:4] {
			e.kill(id, time.Minute, "refused")
		}

		n, err := o.Requeue(ctx, ids[0], ids[4])
		if !errors.Is(err, admin.ErrNotDead) || n != 0 || !strings.Contains(err.Error(), ids[4].String()) {
			t.Fatalf("requeue with a pending id: %d, %v", n, err)
		}
		if !e.row(ids[0]).Dead || woken != 0 {
			t.Fatal("a refused requeue changed something")
		}
		n, err = o.Requeue(ctx, ids[0], ids[0])
		testkit.Must(t, err)
		if r := e.row(ids[0]); n != 1 || !r.Pending() || r.Attempts != 0 || r.Strikes != 0 || woken != 1 {
			t.Fatalf("requeued %d: %+v, woken %d", n, r, woken)
		}

		n, err = o.RequeueType(ctx, "payment.taken")
		testkit.Must(t, err)
		if n != 2 || !e.row(ids[2]).Pending() || !e.row(ids[3]).Pending() || !e.row(ids[1]).Dead {
			t.Fatalf("requeue type: %d", n)
		}
		if n, err := o.RequeueType(ctx, "no.such.type"); err != nil || n != 0 {
			t.Fatalf("requeue an unknown type: %d, %v", n, err)
		}

		n, err = o.RequeueAll(ctx)
		testkit.Must(t, err)
		if n != 1 || !e.row(ids[1]).Pending() || woken != 3 {
			t.Fatalf("requeue all: %d, woken %d", n, woken)
		}
		if n, err := o.RequeueAll(ctx); err != nil || n != 0 {
			t.Fatalf("requeue all again: %d, %v", n, err)
		}
		if testkit.Pending(t, e.db) != 5 {
			t.Fatal("not every event is pending")
		}
	})
}

// PurgeDead deletes the dead events older than the age, and nothing else:
// younger dead events, pending, failing and published events stay.
func TestPurgeDead(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, OrderPlaced{OrderID: "4"}, OrderPlaced{OrderID: "5"})
		e.kill(ids[0], 48*time.Hour, "old")
		e.kill(ids[1], time.Hour, "young")
		e.fail(ids[2])
		e.stamp(ids[3], "created_at", 72*time.Hour)
		e.stamp(ids[4], "processed_at", 72*time.Hour)

		n, err := o.PurgeDead(ctx, 24*time.Hour)
		testkit.Must(t, err)
		if n != 1 || e.exists(ids[0]) {
			t.Fatalf("purged %d", n)
		}
		for _, id := range ids[1:] {
			if !e.exists(id) {
				t.Fatalf("purge deleted %s", id)
			}
		}
		n, err = o.PurgeDead(ctx, 0)
		testkit.Must(t, err)
		if n != 1 || e.exists(ids[1]) || len(testkit.Outbox(t, e.db)) != 3 {
			t.Fatalf("purge all dead: %d", n)
		}
		if _, err := o.PurgeDead(ctx, -time.Second); err == nil {
			t.Fatal("a negative age was accepted")
		}
	})
}

// Open fails on a missing table and a bad config; New does not look for the
// table.
func TestOpenErrors(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		db := d.OpenNew(t, nil)
		if _, err := admin.Open(ctx, db, admin.Config{}); !errors.Is(err, admin.ErrTableMissing) {
			t.Fatalf("Open on no table: %v", err)
		}
		if _, err := admin.New(db, admin.Config{}); err != nil {
			t.Fatalf("New on no table: %v", err)
		}
	})
	for _, cfg := range []admin.Config{
		{Table: "bad name"}, {Table: "a.b.c"}, {Channel: "bad-channel"}, {DeadLimit: -1},
		{TrustedOrigins: []string{"not an origin"}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Fatalf("Validate(%+v) = nil", cfg)
		}
	}
	if err := (admin.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func deadIDs(evs []admin.DeadEvent) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return strings.Join(out, ",")
}

func join(ids ...uuid.UUID) string {
	var out []string
	for _, id := range ids {
		out = append(out, id.String())
	}
	return strings.Join(out, ",")
}
