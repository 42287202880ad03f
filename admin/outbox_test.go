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
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
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
		{Table: "bad name"}, {Table: "a.b.c"}, {Channel: "bad-channel"}, {DeadLimit: -1}, {FailingLimit: -1},
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

// failWith records n failed attempts of the pending event id, the last with
// lastErr, failed ago and due again in due.
func (e *env) failWith(id uuid.UUID, n int, lastErr string, ago, due time.Duration) {
	e.t.Helper()
	for range n {
		e.fail(id)
	}
	testkit.Must(e.t, e.db.Exec(`UPDATE outbox_messages SET last_error = ? WHERE id = ?`, lastErr, id.String()).Error)
	e.stamp(id, "last_failed_at", ago)
	e.stamp(id, "available_at", -due)
}

// Failing events (pending, with a failed attempt) are listed soonest next
// attempt first, with their last error, attempts and next attempt, filtered
// by type; grouped by type and last error, the largest group first. Pending
// events that never failed, dead and published events are not failing.
func TestFailing(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, PaymentTaken{OrderID: "4"},
			OrderPlaced{OrderID: "5"}, OrderPlaced{OrderID: "6"}, OrderPlaced{OrderID: "7"})
		e.failWith(ids[0], 1, "broker: timeout", time.Minute, 3*time.Minute)
		e.failWith(ids[1], 4, "broker: timeout", 10*time.Second, time.Minute)
		e.failWith(ids[2], 2, "schema: <bad> & wrong", time.Hour, 2*time.Minute)
		e.failWith(ids[3], 1, "broker: timeout", 2*time.Minute, 4*time.Minute)
		e.kill(ids[5], time.Minute, "broker: timeout")
		e.fail(ids[6])
		e.stamp(ids[6], "processed_at", time.Second)
		// ids[4] is pending and never failed.

		evs, err := o.Failing(ctx, admin.FailingFilter{}, 10)
		testkit.Must(t, err)
		var got []string
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		if strings.Join(got, ",") != join(ids[1], ids[2], ids[0], ids[3]) {
			t.Fatalf("failing %v, want %s", got, join(ids[1], ids[2], ids[0], ids[3]))
		}
		first := evs[0]
		if first.Type != "order.placed" || first.Topic != "orders" || first.Attempts != 4 || first.LastError != "broker: timeout" ||
			first.LastFailedAt == nil || time.Since(*first.LastFailedAt) < 5*time.Second || time.Since(*first.LastFailedAt) > time.Minute ||
			time.Until(first.NextAttemptAt) < 30*time.Second || time.Until(first.NextAttemptAt) > 2*time.Minute {
			t.Fatalf("first failing %+v", first)
		}
		if evs[1].LastError != "schema: <bad> & wrong" {
			t.Fatalf("second failing %+v", evs[1])
		}
		pay, err := o.Failing(ctx, admin.FailingFilter{Type: "payment.taken"}, 10)
		testkit.Must(t, err)
		if len(pay) != 1 || pay[0].ID != ids[3].String() {
			t.Fatalf("failing payments %+v", pay)
		}
		if one, _ := o.Failing(ctx, admin.FailingFilter{}, 1); len(one) != 1 {
			t.Fatalf("limit 1: %d", len(one))
		}

		gs, err := o.FailingGroups(ctx, admin.FailingFilter{}, 10)
		testkit.Must(t, err)
		if len(gs) != 3 {
			t.Fatalf("groups %+v", gs)
		}
		timeout := gs[0]
		if timeout.Type != "order.placed" || timeout.LastError != "broker: timeout" || timeout.Events != 2 || timeout.MaxAttempts != 4 ||
			time.Until(timeout.NextAttemptAt) > 2*time.Minute || time.Until(timeout.NextAttemptAt) < 30*time.Second ||
			timeout.LastFailedAt == nil || time.Since(*timeout.LastFailedAt) > time.Minute {
			t.Fatalf("largest group %+v", timeout)
		}
		if g := gs[1]; g.Type != "order.placed" || g.LastError != "schema: <bad> & wrong" || g.Events != 1 || g.MaxAttempts != 2 {
			t.Fatalf("second group %+v", g)
		}
		if g := gs[2]; g.Type != "payment.taken" || g.LastError != "broker: timeout" || g.Events != 1 {
			t.Fatalf("third group %+v", g)
		}
		gs, err = o.FailingGroups(ctx, admin.FailingFilter{Type: "payment.taken"}, 10)
		testkit.Must(t, err)
		if len(gs) != 1 || gs[0].Type != "payment.taken" {
			t.Fatalf("payment groups %+v", gs)
		}
		if gs, _ := o.FailingGroups(ctx, admin.FailingFilter{}, 1); len(gs) != 1 || gs[0].Events != 2 {
			t.Fatalf("limit 1: %+v", gs)
		}
		s, err := o.Status(ctx)
		testkit.Must(t, err)
		if s.Total.Failing != 4 {
			t.Fatalf("status counts %d failing, the list 4", s.Total.Failing)
		}
	})
}

// A requeued event's age counts from its requeue, not from its first insert:
// an outbox whose only old event was requeued just now is healthy, by every
// requeue (one id, a type, all).
func TestRequeueAge(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{MaxAge: time.Hour})
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"}, OrderPlaced{OrderID: "3"})
		for _, id := range ids {
			e.stamp(id, "created_at", 48*time.Hour)
			e.kill(id, 24*time.Hour, "refused")
		}
		oldest := func() time.Duration {
			t.Helper()
			s, err := o.Status(ctx)
			testkit.Must(t, err)
			return s.Total.OldestPending()
		}
		_, err := o.Requeue(ctx, ids[0])
		testkit.Must(t, err)
		if age := oldest(); age < 0 || age > time.Minute {
			t.Fatalf("after a requeue the oldest pending is %s old; the event was requeued just now", age)
		}
		_, err = o.RequeueType(ctx, "payment.taken")
		testkit.Must(t, err)
		_, err = o.RequeueAll(ctx)
		testkit.Must(t, err)
		s, err := o.Status(ctx)
		testkit.Must(t, err)
		if s.Total.Pending != 3 || !s.Healthy || s.Total.OldestPending() > time.Minute {
			t.Fatalf("after requeueing every event: %+v", s)
		}
		if evs, err := o.Failing(ctx, admin.FailingFilter{}, 10); err != nil || len(evs) != 0 {
			t.Fatalf("requeued events are failing: %+v, %v", evs, err)
		}
	})
}

// On PostgreSQL's partitioned outbox (by occurred_at, relay.Config.
// DropPartitions) a requeue resets the age too, and the row stays in its
// partition: occurred_at, the partition key, is kept.
func TestRequeueAgePartitioned(t *testing.T) {
	_, dsn := pgtest.Schema(t)
	db := pgtest.OpenDSN(t, dsn, nil)
	r, err := relay.New(db, testkit.MustNotPublish{T: t}, relay.Config{Retention: time.Hour, DropPartitions: true, Logger: testkit.Quiet()})
	testkit.Must(t, err)
	testkit.Must(t, r.Setup(ctx))
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
	e := &env{t: t, d: testkit.Postgres, db: db}
	where := func(id uuid.UUID) (part string, occurred time.Time) {
		t.Helper()
		testkit.Must(t, db.Raw(`SELECT tableoid::regclass::text, occurred_at FROM outbox_messages WHERE id = ?`, id.String()).Row().Scan(&part, &occurred))
		return part, occurred
	}
	ids := e.add(OrderPlaced{OrderID: "1"})
	e.stamp(ids[0], "created_at", 48*time.Hour)
	e.kill(ids[0], 24*time.Hour, "refused")
	part, occurred := where(ids[0])
	o := e.open(admin.Config{MaxAge: time.Hour})
	_, err = o.Requeue(ctx, ids[0])
	testkit.Must(t, err)
	s, err := o.Status(ctx)
	testkit.Must(t, err)
	if !s.Healthy || s.Total.Pending != 1 || s.Total.OldestPending() > time.Minute {
		t.Fatalf("after the requeue: %+v", s)
	}
	if p, occ := where(ids[0]); p != part || !occ.Equal(occurred) || p == "outbox_messages" {
		t.Fatalf("the requeued row is in %s (occurred %s), was in %s (occurred %s)", p, occ, part, occurred)
	}
}

// A payload stored with encoding/json's escapes of <, > and & reads as the
// characters; an escaped backslash before "u003c" stays.
func TestDeadPayloadReadable(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		ids := e.add(OrderPlaced{OrderID: `<a href="x">&</a> \u003c`})
		e.kill(ids[0], time.Minute, "refused")
		ev, err := o.DeadEvent(ctx, ids[0])
		testkit.Must(t, err)
		if want := `{"OrderID":"<a href=\"x\">&</a> \\u003c"}`; string(ev.Payload) != want {
			t.Fatalf("payload %s, want %s", ev.Payload, want)
		}
	})
}
