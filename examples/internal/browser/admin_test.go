package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/chromedp/chromedp"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// chromium returns the Chromium to drive: HERALD_CHROMIUM, else the first of
// the usual names on PATH, else "".
func chromium() string {
	if p := os.Getenv("HERALD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium for the test, with a profile of its
// own and nothing that reaches out to the network (this machine's closed
// network refuses such connections), and returns its context; tab opens
// tabs in it. The test skips when no Chromium is found, and fails instead when
// HERALD_REQUIRE_CHROMIUM is set (as .ci/run does).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium()
	if bin == "" {
		msg := "no Chromium found: install Debian's chromium package (apt-get install chromium) or set HERALD_CHROMIUM"
		if os.Getenv("HERALD_REQUIRE_CHROMIUM") != "" { // CI: the browser tests must run
			t.Fatal(msg + " (HERALD_REQUIRE_CHROMIUM is set)")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	// The first action starts the browser, which lives as long as the
	// context of that action: ctx, not one that times out.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}

// tab opens a tab of browser, closed when the test ends; its actions time out
// after a minute.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // opens the tab, for as long as ctx
		t.Fatalf("open a tab: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// text returns the text of the element sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// Deposited is the event of these tests.
type Deposited struct {
	Account string
	Amount  int
}

func (Deposited) EventType() string { return "account.deposited" }

// publisher is a broker that refuses the messages refuse picks.
type publisher struct {
	message.Publisher
	refuse func(*message.Message) bool
}

func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	if slices.ContainsFunc(msgs, p.refuse) {
		return errors.New(`broker refused: schema "account.deposited" v1 is not registered`)
	}
	return p.Publisher.Publish(topic, msgs...)
}

// The admin page in a real browser, on each database: it shows the event a
// relay killed, with its error; pressing its Requeue button (a POST from the
// page, through the cross-origin protection) makes it pending, the relay
// publishes it to the broker, which now accepts it, and the page then shows
// no dead event, as does its JSON.
func TestAdminPageRequeueInChromium(t *testing.T) {
	browser := newBrowser(t)
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		db := d.OpenNew(t, nil)
		testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: func(*events.Envelope) string { return "accounts" }})))

		// The broker: a subscriber records what it receives.
		gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100}, watermill.NopLogger{})
		subCtx, stopSub := context.WithCancel(context.Background())
		t.Cleanup(stopSub)
		msgs, err := gc.Subscribe(subCtx, "accounts")
		testkit.Must(t, err)
		var (
			mu       sync.Mutex
			received = map[string]bool{}
		)
		go func() {
			for m := range msgs {
				mu.Lock()
				received[m.UUID] = true
				mu.Unlock()
				m.Ack()
			}
		}()
		got := func(id string) bool { mu.Lock(); defer mu.Unlock(); return received[id] }

		// Two events in one batch: the broker refuses the first, the second
		// is published after it, which confirms the failure as the first
		// event's own: with MaxAttempts 1 it dies.
		testkit.Must(t, outboxhook.Add(db, Deposited{"acc-1", 100}, Deposited{"acc-2", 250}))
		rows := testkit.Outbox(t, db)
		poison, good := rows[0].ID.String(), rows[1].ID.String()
		var refusing atomic.Bool
		refusing.Store(true)
		pub := publisher{Publisher: gc, refuse: func(m *message.Message) bool { return refusing.Load() && m.UUID == poison }}
		r, err := relay.New(db, pub, relay.Config{PollInterval: 50 * time.Millisecond, MaxAttempts: 1, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		runRelay(t, r)
		testkit.Eventually(t, 30*time.Second, "the first event dead, the second published", func() bool {
			s, err := r.Stats(context.Background())
			return err == nil && s.Dead == 1 && got(good)
		})

		h, err := admin.New(db, admin.Config{AllowWrites: true, Wake: r.Wake, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		mux := http.NewServeMux()
		mux.Handle("/admin/", http.StripPrefix("/admin", h))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)

		ctx := tab(t, browser)
		testkit.Must(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/admin/"), chromedp.WaitVisible(chromedp.CSS("#dead"))))
		if h := text(t, ctx, "#health"); !strings.Contains(h, "Unhealthy: 1 dead event") {
			t.Fatalf("health: %q", h)
		}
		row := text(t, ctx, "#dead-"+poison)
		if !strings.Contains(row, "account.deposited") || !strings.Contains(row, `schema "account.deposited" v1 is not registered`) {
			t.Fatalf("the dead event's row: %q", row)
		}

		// The broker accepts it now; press Requeue.
		refusing.Store(false)
		testkit.Must(t, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS("#dead-"+poison+" button")),
			chromedp.WaitVisible(chromedp.CSS(".banner.info")),
		))
		if b := text(t, ctx, ".banner.info"); !strings.Contains(b, "Requeued 1 dead event") {
			t.Fatalf("after requeue: %q", b)
		}
		loc, err := chromedp.Run(ctx, chromedp.Location())
		testkit.Must(t, err)
		if loc != srv.URL+"/admin/?requeued=1" {
			t.Fatalf("after requeue the browser is at %s", loc)
		}
		testkit.Eventually(t, 30*time.Second, "the requeued event delivered", func() bool { return got(poison) })

		testkit.Must(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/admin/"), chromedp.WaitVisible(chromedp.CSS("#health"))))
		if main := text(t, ctx, "main"); !strings.Contains(main, "No dead events") || !strings.Contains(main, "Healthy") {
			t.Fatalf("the page after delivery:\n%s", main)
		}
		res, err := http.Get(srv.URL + "/admin/api/status")
		testkit.Must(t, err)
		defer func() { _ = res.Body.Close() }()
		var rep admin.Report
		testkit.Must(t, json.NewDecoder(res.Body).Decode(&rep))
		if rep.Status.Total.Dead != 0 || len(rep.Dead) != 0 || !rep.Status.Healthy {
			t.Fatalf("the JSON after delivery: %+v", rep)
		}
	})
}

func runRelay(t *testing.T, r *relay.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// The page as an operator sees it, with dead events among a backlog, in a
// real browser: a PNG of it is written to HERALD_ADMIN_SCREENSHOT when set
// (docs/admin.png is made so), else to a temporary file.
func TestAdminPageScreenshot(t *testing.T) {
	browser := newBrowser(t)
	db := testkit.SQLite.OpenNew(t, nil)
	topics := map[string]string{"order.placed": "orders", "order.paid": "orders", "payment.captured": "payments", "shipment.created": "shipping"}
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: func(e *events.Envelope) string { return topics[e.Type] }})))
	type ev struct {
		typ, aggType, aggID string
		created, processed  time.Duration // ago; processed 0: not published
		attempts            int
		dead                time.Duration // ago; 0: not dead
		lastErr             string
	}
	seed := []ev{
		{"order.placed", "order", "ord_7Hq2KcP", 134 * time.Second, 0, 0, 0, ""},
		{"order.paid", "order", "ord_7Hq2KcP", 41 * time.Second, 0, 3, 0, "nats: timeout"},
		{"order.placed", "order", "ord_9xTe1Lm", 2 * time.Second, 0, 0, 0, ""},
		{"payment.captured", "payment", "pay_3Fz8", 3 * time.Hour, 0, 15, 2*time.Hour + 10*time.Minute,
			`nats: message rejected by stream "PAYMENTS": maximum payload exceeded (1.4 MB > 1 MB)`},
		{"shipment.created", "shipment", "shp_41", 50 * time.Minute, 0, 12, 12 * time.Minute,
			`amqp: Exception (404) Reason: "NOT_FOUND - no exchange 'shipping.v2' in vhost '/'"`},
		{"order.placed", "order", "ord_2mW", 20 * time.Second, 15 * time.Second, 0, 0, ""},
		{"order.paid", "order", "ord_2mW", 10 * time.Second, 8 * time.Second, 0, 0, ""},
		{"payment.captured", "payment", "pay_77", 30 * time.Second, 29 * time.Second, 0, 0, ""},
	}
	for _, s := range seed {
		testkit.Must(t, outboxhook.Add(db, typed{s.typ}))
	}
	rows := testkit.Outbox(t, db)
	for i, s := range seed {
		set := `aggregate_type = ?, aggregate_id = ?, created_at = ` + sqlitestore.Now + ` - ?, attempts = ?, strikes = ?, last_error = NULLIF(?, '')`
		args := []any{s.aggType, s.aggID, s.created.Microseconds(), s.attempts, min(s.attempts, 12), s.lastErr}
		if s.dead > 0 {
			set += `, dead_at = ` + sqlitestore.Now + ` - ?`
			args = append(args, s.dead.Microseconds())
		}
		if s.processed > 0 {
			set += `, processed_at = ` + sqlitestore.Now + ` - ?`
			args = append(args, s.processed.Microseconds())
		}
		testkit.Must(t, db.Exec(`UPDATE outbox_messages SET `+set+` WHERE id = ?`, append(args, rows[i].ID.String())...).Error)
	}
	h, err := admin.New(db, admin.Config{AllowWrites: true, Title: "Orders service · outbox", Logger: testkit.Quiet()})
	testkit.Must(t, err)
	srv := httptest.NewServer(http.StripPrefix("/admin", h))
	t.Cleanup(srv.Close)

	ctx := tab(t, browser)
	testkit.Must(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1200, 760),
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS("#dead")),
	))
	if row := text(t, ctx, "#dead-"+rows[3].ID.String()); !strings.Contains(row, "maximum payload exceeded") {
		t.Fatalf("dead row %q", row)
	}
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	testkit.Must(t, err)
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width < 1000 || cfg.Height < 400 {
		t.Fatalf("screenshot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	out := os.Getenv("HERALD_ADMIN_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "admin.png")
	}
	testkit.Must(t, os.WriteFile(out, img, 0o644))
	t.Logf("screenshot %dx%d: %s", cfg.Width, cfg.Height, out)
}

// typed is an event of any type, with an empty payload.
type typed struct{ typ string }

func (e typed) EventType() string { return e.typ }
