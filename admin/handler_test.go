package admin_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
)

func (e *env) handler(cfg admin.Config) *admin.Handler {
	e.t.Helper()
	cfg.Logger = testkit.Quiet()
	h, err := admin.New(e.db, cfg)
	testkit.Must(e.t, err)
	return h
}

// serve runs one request through h and returns the response and its body.
func serve(t *testing.T, h http.Handler, r *http.Request) (*httptest.ResponseRecorder, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, w.Body.String()
}

// post is a form POST as a browser sends it from the page (same origin), or
// from site ("cross-site") with origin.
func post(path string, form url.Values, site, origin string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "http://admin.example"+path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", site)
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	return r
}

// getJSON GETs path from h, wants 200 and decodes the body into a T; it
// returns the body too.
func getJSON[T any](t *testing.T, h http.Handler, path string) (T, string) {
	t.Helper()
	res, body := serve(t, h, get(path))
	if res.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.Code, body)
	}
	var v T
	testkit.Must(t, json.Unmarshal([]byte(body), &v))
	return v, body
}

func get(path string) *http.Request {
	return httptest.NewRequest(http.MethodGet, "http://admin.example"+path, nil)
}

// Read-only (the default): the page shows the figures and the dead events
// with their errors, and no button; a POST, even from the page's own origin,
// is refused and changes nothing.
func TestHandlerReadOnly(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"})
		e.kill(ids[1], time.Minute, "payments: <script>alert(1)</script> refused")
		h := e.handler(admin.Config{})

		res, body := serve(t, h, get("/"))
		if res.Code != http.StatusOK || res.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET /: %d %s", res.Code, res.Header().Get("Content-Type"))
		}
		for _, want := range []string{"Unhealthy: 1 dead event", "<code>orders</code>", "<code>payments</code>", ids[1].String(),
			"payment.<wbr>taken", "payments: &lt;script&gt;alert(1)&lt;/script&gt; refused", "Read-only"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the page lacks %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "<form") || strings.Contains(body, "<script>") {
			t.Fatalf("a read-only page with a form or a script:\n%s", body)
		}
		if csp := res.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || res.Header().Get("X-Frame-Options") != "DENY" {
			t.Fatalf("headers %v", res.Header())
		}

		for _, path := range []string{"/requeue", "/requeue-all", "/publish-now", "/cancel-scheduled"} {
			res, body := serve(t, h, post(path, url.Values{"id": {ids[1].String()}}, "same-origin", "http://admin.example"))
			if res.Code != http.StatusForbidden || !strings.Contains(body, "read-only") {
				t.Fatalf("POST %s read-only: %d %s", path, res.Code, body)
			}
		}
		if !e.row(ids[1]).Dead {
			t.Fatal("a read-only page requeued")
		}
	})
}

// With writes: a POST from another origin is refused (Sec-Fetch-Site, or
// Origin against Host for browsers without it) unless the origin is
// trusted; the page's own requeues one event, then all, and redirects back
// to the page, which says what it did.
func TestHandlerRequeueAndCSRF(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"})
		for _, id := range ids {
			e.kill(id, time.Minute, "refused")
		}
		woken := 0
		h := e.handler(admin.Config{AllowWrites: true, Wake: func() { woken++ }, TrustedOrigins: []string{"https://console.example"}})

		_, body := serve(t, h, get("/"))
		if !strings.Contains(body, `action="requeue"`) || !strings.Contains(body, `action="requeue-all"`) ||
			!strings.Contains(body, `name="id" value="`+ids[0].String()+`"`) || strings.Contains(body, "Read-only") {
			t.Fatalf("a writable page without its buttons:\n%s", body)
		}

		form := url.Values{"id": {ids[0].String()}}
		for _, r := range []*http.Request{
			post("/requeue", form, "cross-site", "https://evil.example"),
			post("/requeue", form, "same-site", "https://sub.admin.example"),
			post("/requeue-all", nil, "cross-site", "https://evil.example"),
			post("/requeue", form, "", "https://evil.example"), // no Sec-Fetch-Site: Origin is not Host
		} {
			res, body := serve(t, h, r)
			if res.Code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
				t.Fatalf("cross-origin POST %s (%s): %d %s", r.URL.Path, r.Header.Get("Origin"), res.Code, body)
			}
		}
		if testkit.Pending(t, e.db) != 0 || woken != 0 {
			t.Fatal("a cross-origin POST requeued")
		}

		res, _ := serve(t, h, post("/requeue", form, "same-origin", "http://admin.example"))
		if res.Code != http.StatusSeeOther || res.Header().Get("Location") != "./?requeued=1" {
			t.Fatalf("requeue: %d %s", res.Code, res.Header().Get("Location"))
		}
		if !e.row(ids[0]).Pending() || e.row(ids[1]).Pending() || woken != 1 {
			t.Fatal("requeue did not requeue that one event")
		}
		_, body = serve(t, h, get("/?requeued=1"))
		if !strings.Contains(body, "Requeued 1 dead event") {
			t.Fatalf("no word of the requeue:\n%s", body)
		}

		// The same event again: no longer dead, nothing requeued, and said.
		res, _ = serve(t, h, post("/requeue", form, "same-origin", ""))
		if res.Code != http.StatusSeeOther || res.Header().Get("Location") != "./?notdead="+ids[0].String() {
			t.Fatalf("requeue again: %d %s", res.Code, res.Header().Get("Location"))
		}
		_, body = serve(t, h, get("/?notdead="+ids[0].String()))
		if !strings.Contains(body, "is not dead") {
			t.Fatalf("no word of the refusal:\n%s", body)
		}
		// A bad id, or none.
		for _, f := range []url.Values{{"id": {"nope"}}, {}} {
			if res, _ := serve(t, h, post("/requeue", f, "same-origin", "")); res.Code != http.StatusBadRequest {
				t.Fatalf("requeue %v: %d", f, res.Code)
			}
		}

		// A trusted origin may POST; a JSON client gets JSON.
		r := post("/requeue", url.Values{"id": {ids[1].String()}}, "cross-site", "https://console.example")
		r.Header.Set("Accept", "application/json")
		res, body = serve(t, h, r)
		if res.Code != http.StatusOK || strings.TrimSpace(body) != "{\n  \"requeued\": 1\n}" {
			t.Fatalf("trusted origin: %d %s", res.Code, body)
		}

		res, _ = serve(t, h, post("/requeue-all", nil, "same-origin", ""))
		if res.Code != http.StatusSeeOther || res.Header().Get("Location") != "./?requeued=1" {
			t.Fatalf("requeue all: %d %s", res.Code, res.Header().Get("Location"))
		}
		if testkit.Pending(t, e.db) != 3 || woken != 3 {
			t.Fatalf("after requeue all: %d pending, woken %d", testkit.Pending(t, e.db), woken)
		}
		_, body = serve(t, h, get("/"))
		if !strings.Contains(body, "No dead events") || strings.Contains(body, `action="requeue-all"`) {
			t.Fatalf("the page after requeue all:\n%s", body)
		}
	})
}

// The JSON has the page's data: the same figures as Outbox.Status, the dead
// events without payloads; one dead event has its payload.
func TestHandlerJSON(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"}, PaymentTaken{OrderID: "3"})
		e.kill(ids[1], time.Minute, "refused")
		e.fail(ids[2])
		h := e.handler(admin.Config{DeadLimit: 5})

		res, body := serve(t, h, get("/api/status"))
		if res.Code != http.StatusOK || res.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("GET /api/status: %d %s", res.Code, res.Header().Get("Content-Type"))
		}
		var rep admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &rep))
		want, err := h.Outbox().Status(ctx)
		testkit.Must(t, err)
		if len(rep.Status.Topics) != 2 || rep.Status.Total.Pending != want.Total.Pending || rep.Status.Total.Dead != 1 ||
			rep.Status.Total.Failing != 1 || rep.Status.Healthy || rep.Status.Problems[0] != "1 dead event" || rep.Writes {
			t.Fatalf("report %+v, want %+v", rep, want)
		}
		for i, f := range rep.Status.Topics {
			w := want.Topics[i]
			if f.Topic != w.Topic || f.Pending != w.Pending || f.Failing != w.Failing || f.Dead != w.Dead {
				t.Fatalf("topic %d: %+v, want %+v", i, f, w)
			}
		}
		if len(rep.Dead) != 1 || rep.Dead[0].ID != ids[1].String() || rep.Dead[0].LastError != "refused" || rep.Dead[0].Payload != nil ||
			strings.Contains(body, `"payload"`) {
			t.Fatalf("dead %+v", rep.Dead)
		}

		res, body = serve(t, h, get("/api/dead/"+ids[1].String()))
		var one admin.DeadEvent
		testkit.Must(t, json.Unmarshal([]byte(body), &one))
		if res.Code != http.StatusOK || one.ID != ids[1].String() || compact(one.Payload) != `{"OrderID":"2"}` ||
			compact(one.Metadata) != `{"tenant":"acme"}` {
			t.Fatalf("GET /api/dead/{id}: %d %s", res.Code, body)
		}
		for path, status := range map[string]int{
			"/api/dead/" + ids[0].String():  http.StatusNotFound,
			"/api/dead/" + uuid.NewString(): http.StatusNotFound,
			"/api/dead/nope":                http.StatusBadRequest,
		} {
			res, body := serve(t, h, get(path))
			var je struct{ Error string }
			if err := json.Unmarshal([]byte(body), &je); err != nil || res.Code != status || je.Error == "" {
				t.Fatalf("GET %s: %d %s", path, res.Code, body)
			}
		}

		// The HTML of one dead event: payload and metadata, indented.
		res, body = serve(t, h, get("/dead/"+ids[1].String()))
		if res.Code != http.StatusOK || !strings.Contains(body, "&#34;OrderID&#34;: &#34;2&#34;") || !strings.Contains(body, "tenant") ||
			!strings.Contains(body, `href="../"`) {
			t.Fatalf("GET /dead/{id}: %d\n%s", res.Code, body)
		}
		for path, status := range map[string]int{
			"/dead/" + ids[0].String(): http.StatusNotFound, "/dead/nope": http.StatusBadRequest,
			"/nope": http.StatusNotFound, "/api/nope": http.StatusNotFound,
		} {
			if res, _ := serve(t, h, get(path)); res.Code != status {
				t.Fatalf("GET %s: %d, want %d", path, res.Code, status)
			}
		}
		if res, _ := serve(t, h, get("/requeue")); res.Code != http.StatusMethodNotAllowed {
			t.Fatalf("GET /requeue: %d", res.Code)
		}
	})
}

// A table that does not exist (yet) is an error on the page and in the JSON,
// not a failure of New.
func TestHandlerMissingTable(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		db := d.OpenNew(t, nil)
		h, err := admin.New(db, admin.Config{Table: "nowhere", Logger: testkit.Quiet()})
		testkit.Must(t, err)
		res, body := serve(t, h, get("/"))
		if res.Code != http.StatusInternalServerError || !strings.Contains(body, "Cannot read the outbox") {
			t.Fatalf("GET /: %d\n%s", res.Code, body)
		}
		res, body = serve(t, h, get("/api/status"))
		if res.Code != http.StatusInternalServerError || !strings.Contains(body, `"error"`) {
			t.Fatalf("GET /api/status: %d %s", res.Code, body)
		}
	})
}

// Mounted under a prefix with http.StripPrefix: the prefix without its slash
// redirects to the page, whose relative links and forms, and the redirect
// after a POST, stay under the prefix.
func TestHandlerUnderPrefix(t *testing.T) {
	e := newEnv(t, testkit.SQLite)
	ids := e.add(OrderPlaced{OrderID: "1"})
	e.kill(ids[0], time.Minute, "refused")
	mux := http.NewServeMux()
	h := http.StripPrefix("/ops/outbox", e.handler(admin.Config{AllowWrites: true}))
	mux.Handle("/ops/outbox/", h)
	mux.Handle("/ops/outbox", h) // else the mux redirects, with 307
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	res, err := noFollow.Get(srv.URL + "/ops/outbox")
	testkit.Must(t, err)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/ops/outbox/" {
		t.Fatalf("GET /ops/outbox: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	res, err = srv.Client().Get(srv.URL + "/ops/outbox?x=1")
	testkit.Must(t, err)
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.Request.URL.Path != "/ops/outbox/" || res.Request.URL.RawQuery != "x=1" || !strings.Contains(string(b), `href="dead/`+ids[0].String()+`"`) {
		t.Fatalf("followed to %s:\n%s", res.Request.URL, b)
	}

	// The detail page's link and form resolve under the prefix.
	page, _ := url.Parse(srv.URL + "/ops/outbox/dead/" + ids[0].String())
	res, err = srv.Client().Get(page.String())
	testkit.Must(t, err)
	b, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `action="../requeue"`) {
		t.Fatalf("detail page: %d\n%s", res.StatusCode, b)
	}
	action := page.ResolveReference(&url.URL{Path: "../requeue"})
	req, _ := http.NewRequest(http.MethodPost, action.String(), strings.NewReader(url.Values{"id": {ids[0].String()}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err = noFollow.Do(req)
	testkit.Must(t, err)
	_ = res.Body.Close()
	back := action.ResolveReference(&url.URL{Path: "./", RawQuery: "requeued=1"})
	if res.StatusCode != http.StatusSeeOther || action.ResolveReference(mustParse(t, res.Header.Get("Location"))).String() != back.String() ||
		back.Path != "/ops/outbox/" {
		t.Fatalf("POST %s: %d %s", action.Path, res.StatusCode, res.Header.Get("Location"))
	}
	if !e.row(ids[0]).Pending() {
		t.Fatal("not requeued")
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	testkit.Must(t, err)
	return u
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// With a retention the page shows what was published in the last minute.
func TestHandlerPublished(t *testing.T) {
	e := newEnv(t, testkit.SQLite)
	ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"})
	e.stamp(ids[0], "processed_at", time.Second)
	e.stamp(ids[1], "processed_at", 2*time.Second)
	_, body := serve(t, e.handler(admin.Config{}), get("/"))
	for _, want := range []string{"Published, last minute", `<td class="c-id"><code>orders</code></td><td class="n">0</td><td class="n">0</td><td class="n">0</td><td class="n">–</td><td class="n">2</td>`,
		`<tr class="total"><td>Total</td><td class="n">1</td><td class="n">0</td><td class="n">0</td>`, "Healthy"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the page lacks %q:\n%s", want, body)
		}
	}
}

// The page shows the failing events grouped by type and last error, with
// their attempts, next attempt and the whole error (wrapped, not clipped);
// the JSON has the groups.
func TestHandlerFailing(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		h := e.handler(admin.Config{})
		_, body := serve(t, h, get("/"))
		if !strings.Contains(body, "Failing events (0)") || !strings.Contains(body, "No failing events.") {
			t.Fatalf("a page without failing events:\n%s", body)
		}

		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"})
		long := "broker <refused>: " + strings.Repeat("x", 400) + " end of the error"
		e.failWith(ids[0], 3, long, time.Minute, time.Hour)
		e.failWith(ids[1], 1, long, time.Minute, 2*time.Hour)
		e.failWith(ids[2], 1, "timeout", time.Second, -time.Second)
		res, body := serve(t, h, get("/"))
		if res.Code != http.StatusOK {
			t.Fatalf("GET /: %d", res.Code)
		}
		for _, want := range []string{"Failing events (3)", `id="failing"`, "broker &lt;refused&gt;: " + strings.Repeat("x", 400) + " end of the error",
			"up to 3", "in 59m", "due now", "<code>payment.<wbr>taken</code>", "timeout"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the page lacks %q:\n%s", want, body)
			}
		}
		if !strings.Contains(body, "white-space: pre-wrap") || strings.Contains(body, "max-width: 420px") {
			t.Fatal("the error column clips")
		}

		res, body = serve(t, h, get("/api/status"))
		var rep admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &rep))
		if res.Code != http.StatusOK || len(rep.Failing) != 2 || rep.Failing[0].Events != 2 || rep.Failing[0].LastError != long ||
			rep.Failing[0].MaxAttempts != 3 || rep.Failing[1].Type != "payment.taken" {
			t.Fatalf("api/status failing: %d %+v", res.Code, rep.Failing)
		}

		// FailingLimit: the groups not shown are counted.
		_, body = serve(t, e.handler(admin.Config{FailingLimit: 1}), get("/"))
		if !strings.Contains(body, "1 more in groups not shown") {
			t.Fatalf("the page does not count the failing events not shown:\n%s", body)
		}
	})
}
