package drivertest

import (
	"slices"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var adminTests = []test{
	{"Topics", testAdminTopics},
	{"FindDeadFilters", testAdminFindDead},
	{"FindDeadOldestFirst", testAdminFindDeadRows},
	{"RequeueOnlyDead", testAdminRequeueOnlyDead},
	{"RequeueIDsAllOrNone", testAdminRequeueIDs},
	{"RequeueTypeAndAll", testAdminRequeueTypeAndAll},
	{"PurgeDeadOnlyOldDead", testAdminPurgeDead},
	{"FailingListAndGroups", testAdminFailing},
	{"RequeueResetsAge", testAdminRequeueAge},
	{"FindScheduled", testAdminFindScheduled},
	{"TopicsScheduledAge", testAdminTopicsScheduled},
	{"ScanDeadPagesInDeathOrder", testAdminScanDead},
	{"ActDeadOnlyDeadUpToTheBound", testAdminActDead},
	{"AuditTrail", testAdminAudit},
}

// groupAdmin is the driver's grouping of dead events.
func (e *env) groupAdmin(t tb.TB) store.DeadGroupAdmin {
	ga, ok := e.admin().(store.DeadGroupAdmin)
	if !ok {
		t.Fatalf("%s's Admin is no store.DeadGroupAdmin", e.drv.Name())
	}
	return ga
}

// ScanDead reads dead events in (dead_at, seq) order, by type, up to a
// bound, older than an age, and after a cursor, page by page.
func testAdminScanDead(t tb.TB, e *env) {
	ga := e.groupAdmin(t)
	a := evIDs(e.insert("a.failed", "x", 4))
	b := evIDs(e.insert("b.failed", "y", 2))
	e.insert("c.pending", "z", 1)
	// a[0] and a[1] die in one statement: at the same time, ordered by seq.
	at, arg := e.sql.Ago(3 * time.Hour)
	e.exec(`UPDATE `+e.q()+` SET dead_at = `+at+`, attempts = 3, last_error = CASE WHEN id = ? THEN 'e0' ELSE 'e1' END WHERE id IN (?, ?)`, arg, a[0], a[0], a[1])
	e.kill(a[2], time.Minute, "e2")
	e.kill(b[0], 2*time.Hour, "")
	e.kill(b[1], 10*time.Second, "e4")
	scan := func(s store.DeadScan) []store.DeadBrief {
		t.Helper()
		got, err := ga.ScanDead(e.ctx, e.db, s)
		must(t, err)
		return got
	}
	ids := func(bs []store.DeadBrief) []string {
		out := make([]string, len(bs))
		for i, b := range bs {
			out[i] = b.ID
		}
		return out
	}
	all := scan(store.DeadScan{Limit: 10})
	sameIDs(t, "every dead event", ids(all), []string{a[0], a[1], b[0], a[2], b[1]})
	if all[0].DeadAt != all[1].DeadAt || all[0].Seq >= all[1].Seq || all[2].LastError != "" || all[0].LastError != "e0" || all[0].Type != "a.failed" {
		t.Fatalf("briefs %+v", all)
	}
	if age := time.Since(time.UnixMicro(all[0].DeadAt)); age < 2*time.Hour || age > 4*time.Hour {
		t.Fatalf("DeadAt %d is %s ago, want about 3h", all[0].DeadAt, age)
	}
	// Pages of two: the cursor splits the two of the same death time.
	var paged []store.DeadBrief
	s := store.DeadScan{Limit: 1}
	for {
		page := scan(s)
		paged = append(paged, page...)
		if len(page) < s.Limit {
			break
		}
		s.AfterDeadAt, s.AfterSeq = page[len(page)-1].DeadAt, page[len(page)-1].Seq
	}
	sameIDs(t, "paged one by one", ids(paged), ids(all))
	sameIDs(t, "type a", ids(scan(store.DeadScan{Type: "a.failed", Limit: 10})), []string{a[0], a[1], a[2]})
	sameIDs(t, "up to b[0]'s death", ids(scan(store.DeadScan{UpTo: all[2].DeadAt, Limit: 10})), []string{a[0], a[1], b[0]})
	sameIDs(t, "older than 1h", ids(scan(store.DeadScan{OlderThan: time.Hour, Limit: 10})), []string{a[0], a[1], b[0]})
	sameIDs(t, "type b, up to the last", ids(scan(store.DeadScan{Type: "b.failed", UpTo: all[4].DeadAt, Limit: 10})), []string{b[0], b[1]})
}

// ActDead requeues or deletes the events given that are still dead and died
// at or before the bound, no others, in batches.
func testAdminActDead(t tb.TB, e *env) {
	ga := e.groupAdmin(t)
	a := evIDs(e.insert("a.failed", "x", 2505))
	at, arg := e.sql.Ago(time.Hour)
	e.exec(`UPDATE `+e.q()+` SET dead_at = `+at+`, attempts = 3, last_error = 'e'`, arg)
	all, err := ga.ScanDead(e.ctx, e.db, store.DeadScan{Limit: 3000})
	must(t, err)
	if len(all) != 2505 {
		t.Fatalf("%d dead", len(all))
	}
	bound := all[len(all)-1].DeadAt
	// a[1] requeued meanwhile, a[2] dead again after the bound: both left.
	e.exec(`UPDATE `+e.q()+` SET dead_at = NULL WHERE id = ?`, a[1])
	e.kill(a[2], 0, "again")
	n, err := ga.ActDead(e.ctx, e.db, store.ActRequeue, all, bound)
	must(t, err)
	if n != 2503 {
		t.Fatalf("ActDead requeue = %d, want 2503", n)
	}
	if n, err = ga.ActDead(e.ctx, e.db, store.ActRequeue, all, bound); err != nil || n != 0 {
		t.Fatalf("ActDead requeue again = %d, %v", n, err)
	}
	if r := e.row(a[0]); r.dead || r.attempts != 0 {
		t.Fatalf("requeued row %+v", r)
	}
	if r := e.row(a[2]); !r.dead {
		t.Fatalf("the event dead again after the bound was requeued: %+v", r)
	}
	// Purge: kill them all again an hour ago, then a[3] now: delete all
	// but the one past the bound.
	e.exec(`UPDATE `+e.q()+` SET dead_at = `+at+`, attempts = 3, last_error = 'e'`, arg)
	all, err = ga.ScanDead(e.ctx, e.db, store.DeadScan{Limit: 3000})
	must(t, err)
	bound = all[len(all)-1].DeadAt
	e.kill(a[3], 0, "again, later")
	if n, err = ga.ActDead(e.ctx, e.db, store.ActPurge, all, bound); err != nil || n != 2504 {
		t.Fatalf("ActDead purge = %d, %v, want 2504", n, err)
	}
	left, err := ga.ScanDead(e.ctx, e.db, store.DeadScan{Limit: 10})
	must(t, err)
	if len(left) != 1 || left[0].ID != a[3] {
		t.Fatalf("left %+v", left)
	}
}

// The audit table: created on demand, read back newest first; none before.
func testAdminAudit(t tb.TB, e *env) {
	ga := e.groupAdmin(t)
	got, err := ga.FindAudit(e.ctx, e.db, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("FindAudit before any = %+v, %v", got, err)
	}
	must(t, ga.CreateAudit(e.ctx, e.db))
	must(t, ga.CreateAudit(e.ctx, e.db)) // nothing left to do
	must(t, ga.AddAudit(e.ctx, e.db, store.AuditEntry{By: "alice", Action: "requeue-group", Detail: "d1", Events: 3}))
	must(t, ga.AddAudit(e.ctx, e.db, store.AuditEntry{By: "bob", Action: "purge-group", Detail: "d2", Events: 2}))
	got, err = ga.FindAudit(e.ctx, e.db, 10)
	must(t, err)
	if len(got) != 2 || got[0].By != "bob" || got[0].Action != "purge-group" || got[0].Detail != "d2" || got[0].Events != 2 ||
		got[1].By != "alice" || got[0].Seq <= got[1].Seq {
		t.Fatalf("FindAudit = %+v", got)
	}
	if age := time.Since(got[0].At); age < -time.Minute || age > time.Minute {
		t.Fatalf("recorded at %s, %s ago", got[0].At, age)
	}
	if got, err = ga.FindAudit(e.ctx, e.db, 1); err != nil || len(got) != 1 || got[0].By != "bob" {
		t.Fatalf("FindAudit(1) = %+v, %v", got, err)
	}
}

func (e *env) admin() store.Admin { return e.drv.Admin(e.table) }

// Topics gives each topic's pending, failing and dead counts, its oldest
// pending age and its events published within the last minute (kept by the
// retention), in topic order; RetainsPublished says whether any is kept.
func testAdminTopics(t tb.TB, e *env) {
	ad := e.admin()
	keeps, err := ad.RetainsPublished(e.ctx, e.db)
	must(t, err)
	if keeps {
		t.Fatal("RetainsPublished = true on an empty outbox")
	}
	orders := evIDs(e.insert("orders", "a", 3))
	pays := evIDs(e.insert("payments", "b", 2))
	e.stamp(orders[0], "created_at", time.Hour)
	e.exec(`UPDATE `+e.q()+` SET attempts = 1 WHERE id = ?`, orders[1])
	e.kill(pays[0], 0, "boom")
	e.stamp(pays[1], "processed_at", 0)
	if keeps, err = ad.RetainsPublished(e.ctx, e.db); err != nil || !keeps {
		t.Fatalf("RetainsPublished = %v, %v with a processed row kept", keeps, err)
	}
	ts, err := ad.Topics(e.ctx, e.db)
	must(t, err)
	if len(ts) != 2 || ts[0].Topic != "orders" || ts[1].Topic != "payments" {
		t.Fatalf("Topics = %+v, want orders then payments", ts)
	}
	o, p := ts[0], ts[1]
	if o.Pending != 3 || o.Failing != 1 || o.Dead != 0 || o.OldestPending < 59*time.Minute || o.PublishedLastMinute != 0 {
		t.Fatalf("orders: %+v", o)
	}
	if p.Pending != 0 || p.Dead != 1 || p.OldestPending != 0 || p.PublishedLastMinute != 1 {
		t.Fatalf("payments: %+v", p)
	}
}

// FindDead picks dead events by ids, type and age of death (ANDed), oldest
// death first, up to limit; the zero filter picks every dead event.
func testAdminFindDead(t tb.TB, e *env) {
	a := evIDs(e.insert("a.failed", "x", 3))
	b := evIDs(e.insert("b.failed", "y", 1))
	e.kill(a[0], 3*time.Hour, "e")
	e.kill(a[1], time.Minute, "e")
	e.kill(b[0], 2*time.Hour, "e")
	find := func(f store.DeadFilter, limit int) []string {
		t.Helper()
		rows, err := e.admin().FindDead(e.ctx, e.db, f, limit)
		must(t, err)
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = r.ID
		}
		return out
	}
	sameIDs(t, "every dead event", find(store.DeadFilter{}, 10), []string{a[0], b[0], a[1]})
	sameIDs(t, "limit 1", find(store.DeadFilter{}, 1), []string{a[0]})
	sameIDs(t, "by type", find(store.DeadFilter{Type: "a.failed"}, 10), []string{a[0], a[1]})
	sameIDs(t, "older than an hour", find(store.DeadFilter{OlderThan: time.Hour}, 10), []string{a[0], b[0]})
	sameIDs(t, "by ids", find(store.DeadFilter{IDs: []string{a[1], a[2], b[0]}}, 10), []string{b[0], a[1]})
	sameIDs(t, "ids, type and age", find(store.DeadFilter{IDs: []string{a[0], a[1]}, Type: "a.failed", OlderThan: time.Hour}, 10), []string{a[0]})
}

// RequeueIDs requeues all the ids or, when one is not a dead event, none,
// and returns those.
func testAdminRequeueIDs(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 3))
	e.kill(evs[0], time.Hour, "e")
	e.kill(evs[1], time.Hour, "e")
	notDead, err := e.admin().RequeueIDs(e.ctx, e.db, []string{evs[0], evs[2]})
	must(t, err)
	sameIDs(t, "not dead", notDead, []string{evs[2]})
	if r := e.row(evs[0]); !r.dead {
		t.Fatal("RequeueIDs requeued some of its ids though one was not dead")
	}
	notDead, err = e.admin().RequeueIDs(e.ctx, e.db, []string{evs[0], evs[1]})
	must(t, err)
	if len(notDead) != 0 {
		t.Fatalf("not dead = %v", notDead)
	}
	for _, id := range evs[:2] {
		if r := e.row(id); r.dead || r.attempts != 0 {
			t.Fatalf("requeued row %s: %+v", id, r)
		}
	}
}

// RequeueType requeues the dead events of one type; RequeueAll every dead
// event; both count what they requeued.
func testAdminRequeueTypeAndAll(t tb.TB, e *env) {
	a := evIDs(e.insert("a.failed", "x", 2))
	b := evIDs(e.insert("b.failed", "y", 2))
	for _, id := range slices.Concat(a, b[:1]) {
		e.kill(id, time.Hour, "e")
	}
	n, err := e.admin().RequeueType(e.ctx, e.db, "a.failed")
	must(t, err)
	if n != 2 {
		t.Fatalf("RequeueType = %d, want 2", n)
	}
	if r := e.row(b[0]); !r.dead {
		t.Fatal("RequeueType requeued another type")
	}
	n, err = e.admin().RequeueAll(e.ctx, e.db)
	must(t, err)
	if n != 1 {
		t.Fatalf("RequeueAll = %d, want 1", n)
	}
	s, err := e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Dead != 0 || s.Pending != 4 {
		t.Fatalf("Stats after the requeues = %+v", s)
	}
}

// PurgeDead deletes up to limit events dead for longer than olderThan, and
// never pending or processed ones.
func testAdminPurgeDead(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 6))
	for _, id := range evs[:3] {
		e.kill(id, 2*time.Hour, "e")
	}
	e.kill(evs[3], time.Minute, "e")
	e.stamp(evs[4], "processed_at", 3*time.Hour)
	n, err := e.admin().PurgeDead(e.ctx, e.db, time.Hour, 2)
	must(t, err)
	if n != 2 {
		t.Fatalf("PurgeDead with limit 2 = %d, want 2", n)
	}
	n, err = e.admin().PurgeDead(e.ctx, e.db, time.Hour, 100)
	must(t, err)
	if n != 1 {
		t.Fatalf("second PurgeDead = %d, want 1", n)
	}
	for i, want := range []bool{false, false, false, true, true, true} {
		if r := e.row(evs[i]); r.found != want {
			t.Fatalf("row %d after PurgeDead: found %v, want %v", i, r.found, want)
		}
	}
}

// FindFailing lists the pending events with a failed attempt, soonest next
// attempt first, with their last error, last failure and next attempt, by
// type, up to limit; FailingGroups groups them by type and last error, the
// largest group first. Dead, published and never-failed events are not
// failing.
func testAdminFailing(t tb.TB, e *env) {
	a := evIDs(e.insert("a.failed", "x", 4))
	b := evIDs(e.insert("b.failed", "y", 2))
	fail := func(id string, attempts int, lastErr string, due time.Duration) {
		e.exec(`UPDATE `+e.q()+` SET attempts = ?, last_error = ? WHERE id = ?`, attempts, lastErr, id)
		e.stamp(id, "last_failed_at", time.Minute)
		e.stamp(id, "available_at", -due)
	}
	fail(a[0], 3, "timeout", 3*time.Minute)
	fail(a[1], 1, "timeout", time.Minute)
	fail(a[2], 2, "refused", 2*time.Minute)
	fail(b[0], 1, "timeout", 4*time.Minute)
	fail(b[1], 1, "timeout", 0)
	e.kill(b[1], 0, "timeout")
	e.exec(`UPDATE `+e.q()+` SET attempts = 1 WHERE id = ?`, a[3])
	e.stamp(a[3], "processed_at", 0)
	ad := e.admin()
	find := func(f store.FailingFilter, limit int) []string {
		t.Helper()
		rows, err := ad.FindFailing(e.ctx, e.db, f, limit)
		must(t, err)
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = r.ID
			if r.LastError == "" || r.LastFailedAt.IsZero() || r.NextAttemptAt.IsZero() || r.Attempts == 0 {
				t.Fatalf("failing row %+v lacks its failure", r)
			}
		}
		return out
	}
	sameIDs(t, "every failing event", find(store.FailingFilter{}, 10), []string{a[1], a[2], a[0], b[0]})
	sameIDs(t, "limit 1", find(store.FailingFilter{}, 1), []string{a[1]})
	sameIDs(t, "by type", find(store.FailingFilter{Type: "b.failed"}, 10), []string{b[0]})
	rows, err := ad.FindFailing(e.ctx, e.db, store.FailingFilter{Type: "a.failed"}, 1)
	must(t, err)
	if r := rows[0]; r.Attempts != 1 || r.LastError != "timeout" || time.Until(r.NextAttemptAt) < 30*time.Second ||
		time.Until(r.NextAttemptAt) > 2*time.Minute || time.Since(r.LastFailedAt) < 30*time.Second || time.Since(r.LastFailedAt) > 2*time.Minute {
		t.Fatalf("failing row %+v", r)
	}

	gs, err := ad.FailingGroups(e.ctx, e.db, store.FailingFilter{}, 10)
	must(t, err)
	if len(gs) != 3 {
		t.Fatalf("FailingGroups = %+v, want 3 groups", gs)
	}
	if g := gs[0]; g.Type != "a.failed" || g.LastError != "timeout" || g.Events != 2 || g.MaxAttempts != 3 ||
		time.Until(g.NextAttemptAt) > 2*time.Minute || g.LastFailedAt.IsZero() {
		t.Fatalf("largest group %+v", g)
	}
	if g := gs[1]; g.Type != "a.failed" || g.LastError != "refused" || g.Events != 1 {
		t.Fatalf("second group %+v", g)
	}
	if g := gs[2]; g.Type != "b.failed" || g.LastError != "timeout" || g.Events != 1 {
		t.Fatalf("third group %+v", g)
	}
	if gs, err := ad.FailingGroups(e.ctx, e.db, store.FailingFilter{Type: "b.failed"}, 10); err != nil || len(gs) != 1 {
		t.Fatalf("FailingGroups by type = %+v, %v", gs, err)
	}
	if gs, err := ad.FailingGroups(e.ctx, e.db, store.FailingFilter{}, 1); err != nil || len(gs) != 1 || gs[0].Events != 2 {
		t.Fatalf("FailingGroups limit 1 = %+v, %v", gs, err)
	}
}

// Every requeue (by ids, by type, all) counts the requeued event's age from
// the requeue: Topics' oldest pending age is not its first insert's.
func testAdminRequeueAge(t tb.TB, e *env) {
	ids := evIDs(e.insert("a.failed", "x", 3))
	for _, id := range ids {
		e.stamp(id, "created_at", 48*time.Hour)
		e.kill(id, time.Hour, "boom")
	}
	ad := e.admin()
	_, err := ad.RequeueIDs(e.ctx, e.db, ids[:1])
	must(t, err)
	_, err = ad.RequeueType(e.ctx, e.db, "a.failed")
	must(t, err)
	ts, err := ad.Topics(e.ctx, e.db)
	must(t, err)
	if len(ts) != 1 || ts[0].Pending != 3 || ts[0].OldestPending > time.Minute {
		t.Fatalf("Topics after the requeues = %+v; want 3 pending, a moment old", ts)
	}
	e.kill(ids[0], 0, "boom")
	e.stamp(ids[0], "created_at", 48*time.Hour)
	_, err = ad.RequeueAll(e.ctx, e.db)
	must(t, err)
	if ts, err = ad.Topics(e.ctx, e.db); err != nil || ts[0].OldestPending > time.Minute {
		t.Fatalf("Topics after RequeueAll = %+v, %v", ts, err)
	}
}

// FindDead lists dead events, oldest death first, with their last error,
// attempts and time of death, up to limit.
func testAdminFindDeadRows(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 4))
	e.kill(evs[2], 2*time.Hour, "first")
	e.kill(evs[0], time.Hour, "second")
	e.kill(evs[3], time.Minute, "third")
	dead, err := e.admin().FindDead(e.ctx, e.db, store.DeadFilter{}, 2)
	must(t, err)
	if len(dead) != 2 || dead[0].ID != evs[2] || dead[0].LastError != "first" || dead[1].ID != evs[0] {
		t.Fatalf("FindDead(2) = %+v", dead)
	}
	if dead[0].Attempts != 3 || dead[0].DeadAt.IsZero() || !dead[0].DeadAt.Before(dead[1].DeadAt) {
		t.Fatalf("FindDead(2) = %+v", dead)
	}
}

// A requeue makes a dead event pending again, with its attempts and strikes
// cleared and due now; it leaves pending and unknown events alone.
// RequeueAll requeues every dead event and counts them.
func testAdminRequeueOnlyDead(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 4))
	for _, id := range evs[:3] {
		e.kill(id, time.Hour, "boom")
	}
	notDead, err := e.admin().RequeueIDs(e.ctx, e.db, evs[:1])
	must(t, err)
	if len(notDead) != 0 {
		t.Fatalf("RequeueIDs of a dead event: not dead = %v", notDead)
	}
	if r := e.row(evs[0]); r.dead || r.attempts != 0 || r.strikes != 0 || r.wait > time.Second {
		t.Fatalf("the requeued row: %+v", r)
	}
	for _, id := range []string{evs[0], evs[3], "00000000-0000-0000-0000-000000000000"} {
		if notDead, err := e.admin().RequeueIDs(e.ctx, e.db, []string{id}); err != nil || len(notDead) != 1 || notDead[0] != id {
			t.Fatalf("RequeueIDs of %s, not dead = %v, %v, want it returned", id, notDead, err)
		}
	}
	n, err := e.admin().RequeueAll(e.ctx, e.db)
	must(t, err)
	if n != 2 {
		t.Fatalf("RequeueAll = %d, want 2", n)
	}
	if got := len(e.claim(10)); got != 4 {
		t.Fatalf("claimed %d after the requeues, want 4", got)
	}
}

// FindScheduled lists the scheduled events neither published nor dead, due
// or not, soonest due first, up to the limit, with their due time, key,
// attempts and last error; with Overdue only those already due. Events that
// are not scheduled, and scheduled ones published or dead, are not listed.
func testAdminFindScheduled(t tb.TB, e *env) {
	ad := e.admin()
	find := func(p store.ScheduledParams) []store.Row {
		t.Helper()
		rows, err := ad.FindScheduled(e.ctx, e.db, p)
		must(t, err)
		return rows
	}
	if rows := find(store.ScheduledParams{Limit: 10}); len(rows) != 0 {
		t.Fatalf("FindScheduled of an empty outbox = %+v", rows)
	}
	e.insert("t", "x", 2)
	later := e.scheduled("a", store.Schedule{After: 2 * time.Hour, Key: "reminder:a"})
	soon := e.scheduled("b", store.Schedule{After: time.Hour})
	late := e.scheduled("c", store.Schedule{After: time.Hour, Key: "reminder:c"})
	e.stamp(late.ID, "due_at", 10*time.Minute)
	e.stamp(late.ID, "available_at", -time.Minute)
	e.exec(`UPDATE `+e.q()+` SET attempts = 2, last_error = ? WHERE id = ?`, "timeout", late.ID)
	dead := e.scheduled("d", store.Schedule{After: time.Hour})
	e.stamp(dead.ID, "due_at", time.Hour)
	e.kill(dead.ID, time.Minute, "refused")
	published := e.scheduled("e", store.Schedule{After: time.Hour})
	e.stamp(published.ID, "due_at", time.Hour)
	e.stamp(published.ID, "processed_at", time.Minute)

	rows := find(store.ScheduledParams{Limit: 10})
	sameIDs(t, "scheduled events", ids(rows), []string{late.ID, soon.ID, later.ID})
	r := rows[0]
	if r.Type != "t" || r.Version != 1 || r.AggregateType != "account" || r.AggregateID != "c" || r.Topic != "t" ||
		r.Schedule.Key != "reminder:c" || r.Attempts != 2 || r.LastError != "timeout" || r.OccurredAt.IsZero() || r.Payload != nil {
		t.Fatalf("the overdue scheduled event: %+v", r)
	}
	within(t, "time since the overdue event came due", time.Since(r.Schedule.At), 10*time.Minute)
	if r := rows[2]; r.Schedule.Key != "reminder:a" || r.Attempts != 0 || r.LastError != "" {
		t.Fatalf("the event due in two hours: %+v", r)
	}
	within(t, "time until the event due in two hours", time.Until(rows[2].Schedule.At), 2*time.Hour)
	if loc := rows[1].Schedule.At.Location(); loc != time.UTC {
		t.Fatalf("due time in %v, want UTC", loc)
	}
	sameIDs(t, "limit 2", ids(find(store.ScheduledParams{Limit: 2})), []string{late.ID, soon.ID})
	sameIDs(t, "overdue", ids(find(store.ScheduledParams{Limit: 10, Overdue: true})), []string{late.ID})
	e.stamp(soon.ID, "due_at", time.Second)
	sameIDs(t, "overdue, two", ids(find(store.ScheduledParams{Limit: 10, Overdue: true})), []string{late.ID, soon.ID})
	sameIDs(t, "overdue, limit 1", ids(find(store.ScheduledParams{Limit: 1, Overdue: true})), []string{late.ID})
}

// Topics counts a scheduled event as pending, but not in the oldest pending
// age while it waits for its time; once due, its age counts from its due
// time, not from its insert.
func testAdminTopicsScheduled(t tb.TB, e *env) {
	ev := e.scheduled("a", store.Schedule{After: time.Hour})
	e.stamp(ev.ID, "created_at", 2*time.Hour)
	topics := func() store.TopicStats {
		t.Helper()
		ts, err := e.admin().Topics(e.ctx, e.db)
		must(t, err)
		if len(ts) != 1 || ts[0].Topic != "t" {
			t.Fatalf("Topics = %+v, want the topic t", ts)
		}
		return ts[0]
	}
	if ts := topics(); ts.Pending != 1 || ts.OldestPending != 0 {
		t.Fatalf("Topics with an event due in an hour = %+v, want 1 pending, no age", ts)
	}
	e.stamp(ev.ID, "due_at", 10*time.Minute)
	e.stamp(ev.ID, "available_at", 10*time.Minute)
	within(t, "oldest pending age of an event due 10 minutes ago", topics().OldestPending, 10*time.Minute)
	plain := e.insert("t", "b", 1)[0]
	e.stamp(plain.ID, "created_at", time.Hour)
	within(t, "oldest pending age with an event inserted an hour ago", topics().OldestPending, time.Hour)
}
