package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestNormalizeError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"timeout after 5s to 10.0.0.7", "timeout after <n>s to <ip>"},
		{"timeout after 5s to 10.0.0.9", "timeout after <n>s to <ip>"},
		{"dial tcp 10.0.0.7:5672: connect: connection refused", "dial tcp <ip>: connect: connection refused"},
		{"dial tcp [fe80::1%eth0]:4222: i/o timeout", "dial tcp <ip>: i/o timeout"},
		{"dial tcp [::1]:4222: i/o timeout", "dial tcp <ip>: i/o timeout"},
		{"no route to 2001:db8:85a3:0:0:8a2e:370:7334", "no route to <ip>"},
		{"no route to 2001:db8::7334 now", "no route to <ip> now"},
		{"order 0190c3e2-5b7a-7c1e-9f3d-2a4b6c8d0e1f not found", "order <uuid> not found"},
		{"order 0190C3E2-5B7A-7C1E-9F3D-2A4B6C8D0E1F not found", "order <uuid> not found"},
		{"bad pointer 0xc000123abc", "bad pointer <hex>"},
		{"digest 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b mismatch", "digest <id> mismatch"},
		{"message 01ARZ3NDEKTSV4RRFFQ69G5FAV refused", "message <id> refused"},
		{"account 12345 over limit 100.50", "account <n> over limit <n>"},
		{"HTTP 503: retry after 30", "HTTP <n>: retry after <n>"},
		{"s3 upload failed: utf8 invalid at byte 17", "s3 upload failed: utf8 invalid at byte <n>"},
		{"at 2026-12-06T08:26:39.123Z: closed", "at <time>: closed"},
		{"at 2026-12-06 08:26:39+02:00: closed", "at <time>: closed"},
		{"pkg::name failed", "pkg::name failed"},
		{"  many\n\tspaces  ", "many spaces"},
		{"connection reset by peer", "connection reset by peer"},
		{"", ""},
		{"topic v2.orders: 3 of 3 attempts", "topic v2.orders: <n> of <n> attempts"},
		{"sequence 10:00:01 late", "sequence <n>:<n>:<n> late"},
	} {
		if got := admin.NormalizeError(c.in); got != c.want {
			t.Errorf("NormalizeError(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDeadGroupKeyRoundTrip(t *testing.T) {
	t.Parallel()
	k := admin.DeadGroupKey{Type: "order.paid", Error: "timeout after <n>s to <ip>", Until: time.UnixMicro(1796545599123456).UTC()}
	got, err := admin.ParseDeadGroupKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseDeadGroupKey(%s) = %+v, %v, want %+v", k, got, err, k)
	}
	for _, bad := range []string{"", "g1.", "g1.!!", "g2.e30", "g1.e30"} {
		if _, err := admin.ParseDeadGroupKey(bad); !errors.Is(err, admin.ErrBadGroupKey) {
			t.Errorf("ParseDeadGroupKey(%q) = %v, want ErrBadGroupKey", bad, err)
		}
	}
}

// The page's group actions: shown and allowed only with AllowWrites, behind
// the cross-origin protection; a dry run, a purge with a retention, the
// audit trail naming Config.Actor's operator; the JSON of api/status has
// the groups.
func TestHandlerDeadGroups(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"})
		e.kill(ids[0], 48*time.Hour, "timeout after 5s to 10.0.0.7")
		e.kill(ids[1], time.Hour, "timeout after 7s to 10.0.0.8")
		e.kill(ids[2], time.Hour, "refused")

		ro := e.handler(admin.Config{})
		_, body := serve(t, ro, get("/"))
		if !strings.Contains(body, `id="dead-groups"`) || !strings.Contains(body, "timeout after &lt;n&gt;s to &lt;ip&gt;") || strings.Contains(body, "requeue-group") {
			t.Fatalf("the read-only page's groups:\n%s", body)
		}
		res, body := serve(t, ro, get("/api/status"))
		var rep admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &rep))
		if res.Code != http.StatusOK || len(rep.DeadGroups.Groups) != 2 || rep.DeadGroups.Groups[0].Events != 2 {
			t.Fatalf("api/status dead_groups: %+v", rep.DeadGroups)
		}
		key := rep.DeadGroups.Groups[0].Key
		form := url.Values{"key": {key}}
		for _, path := range []string{"/requeue-group", "/purge-group"} {
			if res, body := serve(t, ro, post(path, form, "same-origin", "http://admin.example")); res.Code != http.StatusForbidden || !strings.Contains(body, "read-only") {
				t.Fatalf("POST %s read-only: %d %s", path, res.Code, body)
			}
		}

		h := e.handler(admin.Config{AllowWrites: true, Actor: func(r *http.Request) string { return "op " + r.Header.Get("X-Operator") }})
		if _, body := serve(t, h, get("/")); !strings.Contains(body, `action="requeue-group"`) || !strings.Contains(body, `name="key" value="`+key+`"`) {
			t.Fatalf("the writable page's groups:\n%s", body)
		}
		for _, path := range []string{"/requeue-group", "/purge-group"} {
			if res, body := serve(t, h, post(path, form, "cross-site", "https://evil.example")); res.Code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
				t.Fatalf("cross-origin POST %s: %d %s", path, res.Code, body)
			}
		}
		if res, _ := serve(t, h, post("/purge-group", url.Values{"key": {"nonsense"}}, "same-origin", "http://admin.example")); res.Code != http.StatusBadRequest {
			t.Fatalf("a bad key: %d", res.Code)
		}
		dry := url.Values{"key": {key}, "dry_run": {"1"}, "older_than": {"24h0m0s"}}
		res, _ = serve(t, h, post("/purge-group", dry, "same-origin", "http://admin.example"))
		if res.Code != http.StatusSeeOther || res.Header().Get("Location") != "./?dry=1&group=purge-group&n=1" || !e.row(ids[0]).Dead {
			t.Fatalf("dry run: %d %s", res.Code, res.Header().Get("Location"))
		}
		if _, body := serve(t, h, get("/?dry=1&group=purge-group&n=1")); !strings.Contains(body, "Dry run: the group&#39;s action would purge 1 dead event; nothing was changed.") {
			t.Fatalf("the dry run's banner:\n%s", body)
		}
		r := post("/purge-group", url.Values{"key": {key}, "older_than": {"24h0m0s"}}, "same-origin", "http://admin.example")
		r.Header.Set("X-Operator", "carol")
		res, _ = serve(t, h, r)
		if res.Code != http.StatusSeeOther || res.Header().Get("Location") != "./?group=purge-group&n=1" || e.exists(ids[0]) || !e.row(ids[1]).Dead {
			t.Fatalf("purge older than 1d: %d %s", res.Code, res.Header().Get("Location"))
		}
		r = post("/requeue-group", form, "same-origin", "http://admin.example")
		r.Header.Set("Accept", "application/json")
		res, body = serve(t, h, r)
		var got admin.GroupResult
		testkit.Must(t, json.Unmarshal([]byte(body), &got))
		if res.Code != http.StatusOK || got.Events != 1 || e.row(ids[1]).Dead {
			t.Fatalf("requeue (JSON): %d %s", res.Code, body)
		}
		a, err := h.Outbox().Audit(context.Background(), 10)
		testkit.Must(t, err)
		if len(a) != 2 || a[1].By != "op carol" || a[1].Action != "purge-group" || a[0].By != "op " || a[0].Events != 1 {
			t.Fatalf("audit: %+v", a)
		}
	})
}
