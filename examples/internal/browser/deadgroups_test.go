package browser

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
)

// An operator runs a group's dry run, then requeues the group, in a real
// browser: the page says how many each took; the same form sent again (a
// double click) takes nothing; a POST from another origin is refused.
func TestAdminPageDeadGroupInChromium(t *testing.T) {
	browser := newBrowser(t)
	page, _ := seedPage(t)
	ctx := tab(t, browser)
	first := "#dead-groups tbody tr:first-child "
	testkit.Must(t, chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#dead-groups"))))
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(first+`form[action="requeue-group"] input[name="key"]`), "value"))
	testkit.Must(t, err)
	key := attr.Value
	if !attr.Exists || !strings.HasPrefix(key, "g1.") {
		t.Fatalf("the first group's key: %q", key)
	}

	testkit.Must(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(first+`form[action="requeue-group"] button[name="dry_run"]`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.info")),
	))
	if b := text(t, ctx, ".banner.info"); !strings.Contains(b, "Dry run: the group's action would requeue 2 dead events") {
		t.Fatalf("after the dry run: %q", b)
	}
	if h := text(t, ctx, "#health"); !strings.Contains(h, "5 dead events") {
		t.Fatalf("after the dry run: %q", h)
	}
	testkit.Must(t, chromedp.Do(ctx,
		chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#dead-groups")), // no banner
		chromedp.Click(chromedp.CSS(first+`form[action="requeue-group"] button:not([name])`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.info")),
	))
	if b := text(t, ctx, ".banner.info"); !strings.Contains(b, "Requeued 2 dead events of the group") {
		t.Fatalf("after the requeue: %q", b)
	}
	if h := text(t, ctx, "#health"); !strings.Contains(h, "3 dead events") {
		t.Fatalf("after the requeue: %q", h)
	}

	// The same form again, as a second click sends it.
	base := strings.TrimSuffix(page, "/")
	post := func(origin string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/requeue-group", strings.NewReader(url.Values{"key": {key}}.Encode()))
		testkit.Must(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		res, err := http.DefaultClient.Do(req)
		testkit.Must(t, err)
		defer func() { _ = res.Body.Close() }()
		body, err := io.ReadAll(res.Body)
		testkit.Must(t, err)
		return res.StatusCode, body
	}
	status, body := post("")
	var got admin.GroupResult
	testkit.Must(t, json.Unmarshal(body, &got))
	if status != http.StatusOK || got.Events != 0 || got.Action != "requeue-group" {
		t.Fatalf("the same form again: %d %s", status, body)
	}
	if status, body := post("https://evil.example"); status != http.StatusForbidden {
		t.Fatalf("a cross-origin group requeue: %d %s, want 403", status, body)
	}
}
