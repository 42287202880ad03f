package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/heraldgo/herald/internal/ident"
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

// seedPage serves the admin page of an outbox as an operator sees it: dead
// events among a backlog, a failing event, long identifiers, an error with
// an ESC byte (a colour escape a broker echoed) and a relay that stopped
// three minutes ago while events are due. It returns the page's URL and the
// outbox rows, in the order seeded.
func seedPage(t *testing.T) (string, []testkit.Row) {
	t.Helper()
	db := testkit.SQLite.OpenNew(t, nil)
	topics := map[string]string{"order.placed": "orders", "order.paid": "orders", "payment.captured": "payments", "shipment.created": "shipping",
		"customer.loyalty-tier.recalculated.v2": "customer-loyalty-tier-recalculations"}
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
			"amqp: Exception (404) Reason: \"NOT_FOUND - no exchange 'shipping.v2' in vhost '/'\" \x1b[31mchannel closed\x1b[0m"},
		{"customer.loyalty-tier.recalculated.v2", "customer-loyalty-account", "cla_01HZX3B7R5Q9M2K8V4N6P0T1W3Y5", 20 * time.Minute, 0, 12, 5 * time.Minute,
			"kafka: produce to customer-loyalty-tier-recalculations: " + strings.Repeat("Broker: Message size too large; ", 4) +
				"https://kafka.internal.example.com/clusters/prod-eu-west-1/topics/customer-loyalty-tier-recalculations/configs/max.message.bytes"},
		{"payment.captured", "payment", "pay_3Fz9", 3 * time.Hour, 0, 15, 2 * time.Hour,
			`nats: message rejected by stream "PAYMENTS": maximum payload exceeded (1.3 MB > 1 MB)`},
		{"order.placed", "order", "ord_2mW", 20 * time.Second, 15 * time.Second, 0, 0, ""},
		{"order.paid", "order", "ord_2mW", 10 * time.Second, 8 * time.Second, 0, 0, ""},
		{"shipment.created", "shipment", "shp_42", 40 * time.Minute, 0, 12, 11 * time.Minute,
			"amqp: Exception (404) Reason: \"NOT_FOUND - no exchange 'shipping.v2' in vhost '/'\" \x1b[31mchannel closed\x1b[0m"},
		{"payment.captured", "payment", "pay_77", 30 * time.Second, 29 * time.Second, 0, 0, ""},
	}
	for _, s := range seed {
		testkit.Must(t, outboxhook.Add(db, typed{s.typ}))
	}
	rows := testkit.Outbox(t, db)
	for i, s := range seed {
		set := `aggregate_type = ?, aggregate_id = ?, created_at = ` + sqlitestore.Now + ` - ?, available_at = ` + sqlitestore.Now + ` - ?, attempts = ?, strikes = ?, last_error = NULLIF(?, '')`
		args := []any{s.aggType, s.aggID, s.created.Microseconds(), s.created.Microseconds(), s.attempts, min(s.attempts, 12), s.lastErr}
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
	// A relay that stopped: its heartbeat row, three minutes old.
	hb := sqlitestore.Driver{}.Heartbeats(ident.MustTable("outbox_messages"))
	ctx := context.Background()
	sqlDB, err := db.DB()
	testkit.Must(t, err)
	testkit.Must(t, hb.Create(ctx, sqlDB))
	testkit.Must(t, hb.Beat(ctx, sqlDB, "orders-api-7d9f8c6b5-x2x7q-41-3f2a9c1e"))
	testkit.Must(t, db.Exec(`UPDATE outbox_messages_relays SET seen_at = seen_at - ?`, (3*time.Minute+12*time.Second).Microseconds()).Error)

	h, err := admin.New(db, admin.Config{AllowWrites: true, Title: "Orders service · outbox", Logger: testkit.Quiet()})
	testkit.Must(t, err)
	srv := httptest.NewServer(http.StripPrefix("/admin", h))
	t.Cleanup(srv.Close)
	return srv.URL + "/admin/", rows
}

// overflow lists what overflows horizontally: the page (wider than the
// window) and each panel (a table, a pre, a dl, a .panel, anything directly
// in main) whose content is wider than its box.
const overflow = `(() => {
	const out = [];
	const de = document.documentElement;
	if (de.scrollWidth > window.innerWidth) out.push("page " + de.scrollWidth + " > " + window.innerWidth);
	for (const el of document.querySelectorAll("main, main > *, table, pre, dl, .panel")) {
		if (el.scrollWidth > el.clientWidth) out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + " " + el.scrollWidth + " > " + el.clientWidth);
	}
	return out;
})()`

// midWord lists the words a cell (td, th) breaks across lines: runs of two or
// more letters, not pieces of an identifier (glued to digits or
// underscores) nor of a token over 30 characters (a URL, which must break
// somewhere).
const midWord = `(() => {
	const out = [];
	for (const cell of document.querySelectorAll("td, th")) {
		const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
		for (let n = walker.nextNode(); n; n = walker.nextNode()) {
			const tokens = /\S+/g;
			let t;
			while ((t = tokens.exec(n.data))) {
				if (t[0].length > 30) continue;
				const words = /[A-Za-z]{2,}/g;
				let m;
				while ((m = words.exec(t[0]))) {
					const before = t[0][m.index - 1] || " ", after = t[0][m.index + m[0].length] || " ";
					if (/[0-9_]/.test(before) || /[0-9_]/.test(after)) continue;
					const r = document.createRange();
					r.setStart(n, t.index + m.index);
					r.setEnd(n, t.index + m.index + m[0].length);
					const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
					if (tops.size > 1) out.push(((cell.closest("table") || {}).id || "?") + ": " + m[0]);
				}
			}
		}
	}
	return out;
})()`

// The page fits a window 800 px wide and one 1280 px wide, with long
// errors, types and identifiers: neither the page nor any of its panels
// scrolls sideways, and no cell breaks a word across lines (the dead groups'
// too). An ESC byte in an error is shown escaped (\x1b), as the
// herald command prints it, and the relays panel says, in red, that no relay
// was seen for three minutes while events are due. With
// HERALD_ADMIN_SCREENSHOT_DIR set, a PNG of each width is written there.
func TestAdminPageLayout(t *testing.T) {
	browser := newBrowser(t)
	url, rows := seedPage(t)
	for _, width := range []int64{800, 1280} {
		ctx := tab(t, browser)
		testkit.Must(t, chromedp.Do(ctx,
			chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(url),
			chromedp.WaitVisible(chromedp.CSS("#dead")),
			chromedp.WaitVisible(chromedp.CSS("#dead-groups")),
		))
		over, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](overflow))
		testkit.Must(t, err)
		if len(over) > 0 {
			t.Errorf("at %d px, the page overflows: %s", width, strings.Join(over, "; "))
		}
		broken, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](midWord))
		testkit.Must(t, err)
		if len(broken) > 0 {
			t.Errorf("at %d px, cells break words: %s", width, strings.Join(broken, "; "))
		}
		if g := text(t, ctx, "#dead-groups tbody tr:first-child"); !strings.Contains(g, "payment.captured") ||
			!strings.Contains(g, "maximum payload exceeded (<n> MB > <n> MB)") || !strings.Contains(g, "Requeue 2") {
			t.Errorf("at %d px, the first dead group reads %q", width, g)
		}
		if dir := os.Getenv("HERALD_ADMIN_SCREENSHOT_DIR"); dir != "" { // to look at
			img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			testkit.Must(t, err)
			testkit.Must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("admin-%d.png", width)), img, 0o644))
		}
		errText := text(t, ctx, "#dead-"+rows[4].ID.String()+" .err")
		if strings.Contains(errText, "\x1b") || !strings.Contains(errText, `\x1b[31mchannel closed\x1b[0m`) {
			t.Errorf("at %d px, the error with an ESC reads %q, want it escaped as \\x1b", width, errText)
		}
		none := text(t, ctx, "#relays-none")
		if !strings.Contains(none, "No relay seen for 3m1") || !strings.Contains(none, "events wait") {
			t.Errorf("at %d px, relays: %q", width, none)
		}
		color, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#relays-none")).color`))
		testkit.Must(t, err)
		if color != "rgb(180, 35, 24)" { // --bad
			t.Errorf("at %d px, the no-relay line is %s, not red", width, color)
		}

		// The dead event with the longest names and error, on its own page.
		long := rows[5].ID.String()
		testkit.Must(t, chromedp.Do(ctx, chromedp.Navigate(url+"dead/"+long), chromedp.WaitVisible(chromedp.CSS("#payload"))))
		over, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](overflow))
		testkit.Must(t, err)
		if len(over) > 0 {
			t.Errorf("at %d px, the dead event's page overflows: %s", width, strings.Join(over, "; "))
		}
	}
}

// The page as an operator sees it, at 1280 px, in a real browser: a PNG of
// it is written to docs/admin.png when HERALD_UPDATE_SCREENSHOT=1, to
// HERALD_ADMIN_SCREENSHOT when set, else to a temporary file.
func TestAdminPageScreenshot(t *testing.T) {
	browser := newBrowser(t)
	url, rows := seedPage(t)
	ctx := tab(t, browser)
	testkit.Must(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#dead")),
	))
	if row := text(t, ctx, "#dead-"+rows[3].ID.String()); !strings.Contains(row, "maximum payload exceeded") {
		t.Fatalf("dead row %q", row)
	}
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	testkit.Must(t, err)
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width != 1280 || cfg.Height < 400 {
		t.Fatalf("screenshot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	out := os.Getenv("HERALD_ADMIN_SCREENSHOT")
	if os.Getenv("HERALD_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "..", "docs", "admin.png") // from examples/internal/browser
	}
	if out == "" {
		out = filepath.Join(t.TempDir(), "admin.png")
	}
	testkit.Must(t, os.WriteFile(out, img, 0o644))
	t.Logf("screenshot %dx%d: %s", cfg.Width, cfg.Height, out)
}

// typed is an event of any type, with an empty payload.
type typed struct{ typ string }

func (e typed) EventType() string { return e.typ }
