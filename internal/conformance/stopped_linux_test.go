package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// The helper process of StoppedProcessPastItsLease: the test binary run
// again with these set, the database's DSN and the event its publisher
// refuses.
const (
	stoppedDSNEnv = "HERALD_TEST_STOPPED_RELAY_DSN"
	stoppedXEnv   = "HERALD_TEST_STOPPED_RELAY_X"
	stoppedPrefix = "herald-stopped-relay: "
)

// stoppedCfg is the ordered relays' config of StoppedProcessPastItsLease.
func stoppedCfg(id string) relay.Config {
	return relay.Config{Ordered: true, Partitions: 4, LeaseDuration: 2 * time.Second, PublishTimeout: 400 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, PublishConcurrency: 1, MaxAttempts: 1,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, Retention: time.Hour, InstanceID: id}
}

// A real ordered relay process (the test binary run again as a helper) is
// stopped with SIGSTOP after its publishes, before its marks, and stays
// stopped past its lease: its timers and lease renewals all stand still. Another relay (in this process) takes its partitions over,
// publishes the events and is held before its own marks; the helper gets
// SIGCONT and finishes its batch. Its late marks change nothing (x, which it
// failed to publish, is neither dead nor counted an attempt) and it
// publishes nothing more; then the other relay's marks make every event
// published, none dead, none both dead and processed.
func testRelayStoppedProcessPastItsLease(t *testing.T, dl testkit.Dialect) {
	if dsn := os.Getenv(stoppedDSNEnv); dsn != "" {
		stoppedRelayProcess(t, dl, dsn, os.Getenv(stoppedXEnv))
		return
	}
	e := newRelayEnv(t, dl)
	first := e.write(1, 3)
	var x string
	for _, ids := range first {
		x = ids[0].String()
	}
	all := testkit.IDSet(first)
	for id := range testkit.IDSet(e.write(3, 3)) {
		all[id] = true
	}

	cmd := exec.Command(os.Args[0], "-test.run="+onlyThisTest(t), "-test.v")
	cmd.Env = append(os.Environ(), stoppedDSNEnv+"="+e.dsn, stoppedXEnv+"="+x)
	cmd.Stderr = os.Stderr
	// A process group of its own: a stopped process in a process group that
	// becomes orphaned gets SIGHUP and SIGCONT from the kernel, which would
	// resume it early; the helper's group has this process as its parent's
	// for as long as the test runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	must(t, err)
	goAhead, err := cmd.StdinPipe()
	must(t, err)
	must(t, cmd.Start())
	pid := cmd.Process.Pid
	t.Cleanup(func() { // only the process this test started
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), stoppedPrefix); ok {
				lines <- l
			}
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the helper process ended before %s", what)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for the helper process: %s", what)
		}
		return ""
	}
	for l := next("its batch, before its marks"); l != "stop me"; l = next("its batch, before its marks") {
		if !strings.HasPrefix(l, "published ") {
			t.Fatalf("helper: %s", l)
		}
	}
	must(t, cmd.Process.Signal(syscall.SIGSTOP))
	eventually(t, 10*time.Second, "the helper process stopped", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] == "T"
	})
	lease := stoppedCfg("").LeaseDuration
	time.Sleep(lease + lease/3 + lease/2) // its leases and last heartbeat are past
	select {
	case l := <-lines:
		t.Fatalf("the helper process went on before it was sent SIGCONT: %s", l)
	default:
	}

	gc := testkit.NewGoChannel()
	pb := &testkit.Counting{Publisher: gc}
	hb := newPauser(relayhook.Marks, func() bool { return total(pb) == len(all) })
	bcfg := stoppedCfg("b")
	var logBuf syncBuffer
	bcfg.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := e.relay(e.open(), pb, bcfg)
	hb.run(t, b)
	select {
	case <-hb.paused:
	case <-time.After(20 * time.Second):
		for _, r := range e.rows() {
			t.Logf("row %s %s pending %v attempts %d", r.ID, r.AggregateID, r.Pending(), r.Attempts)
		}
		if b, err := os.ReadFile("/proc/locks"); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, fmt.Sprintf(" %d ", pid)) {
					t.Logf("helper lock: %s", l)
				}
			}
		}
		var said []string
		for len(lines) > 0 {
			said = append(said, <-lines)
		}
		t.Fatalf("timed out waiting for the other relay to hold the events, published, before its marks: it published %d of %d, leases %v; the helper said %q\n%s",
			total(pb), len(all), testkit.Leases(e.db), said, logBuf.String())
	}
	must(t, cmd.Process.Signal(syscall.SIGCONT))
	_, err = goAhead.Write([]byte("go\n"))
	must(t, err)
	for l := next("its batch, over"); !strings.HasPrefix(l, "done"); l = next("its batch, over") {
		t.Fatalf("the helper process, resumed past its lease: %s", l)
	}
	close(hb.resume)
	if err := wait(t, hb.done, 20*time.Second, "the other relay's batch over"); err != nil {
		t.Fatalf("the other relay's batch: %v", err)
	}
	eventually(t, 20*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
	time.Sleep(200 * time.Millisecond)
	select {
	case l, ok := <-lines:
		if ok {
			t.Fatalf("the helper process, after its batch: %s", l)
		}
	default:
	}
	rows := e.rows()
	if len(rows) != len(all) {
		t.Fatalf("%d rows, want %d", len(rows), len(all))
	}
	for _, r := range rows {
		if r.Dead || !r.Processed || r.Attempts != 0 || r.Strikes != 0 {
			t.Fatalf("event %s (x: %v) after the helper resumed: dead %v, processed %v, attempts %d, strikes %d: its late marks changed it",
				r.ID, r.ID.String() == x, r.Dead, r.Processed, r.Attempts, r.Strikes)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stoppedRelayProcess is the helper process: an ordered relay whose publisher
// refuses x and reports the rest on stdout, whose first batch waits before
// its marks (for the test to stop the process, then to let it go on), then
// reports that batch's end.
func stoppedRelayProcess(t *testing.T, dl testkit.Dialect, dsn, x string) {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(stoppedPrefix+format+"\n", args...)
	}
	pub := testkit.PublisherFunc(func(_ string, msgs ...*message.Message) error {
		for _, m := range msgs {
			if m.UUID == x {
				return errors.New("broker refused this event")
			}
		}
		say("published %d", len(msgs))
		return nil
	})
	cfg := stoppedCfg("a")
	cfg.Logger = quiet()
	cfg.DisableListen = true // LISTEN would keep the pool's one connection
	db := dl.Open(t, dsn, nil)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(1)
	r, err := relay.New(db, pub, cfg)
	must(t, err)
	batches := 0
	hook := func(p relayhook.Point, err error) {
		switch {
		case p == relayhook.Claimed:
			batches++
		case p == relayhook.Marks && batches == 1:
			// Stopped holding the pool's one connection, idle: not inside
			// another goroutine's statement (an SQLite process stopped inside
			// a write keeps the database's one write lock, and every other
			// writer waits for it: no fencing helps there). A write
			// transaction begun and rolled back on it (BEGIN IMMEDIATE on
			// SQLite: the DSN's) shows the write lock free. The test stops
			// the process while the batch waits here (a process stopping
			// itself runs on for a moment after its kill returns), and lets
			// the batch go on once it sent SIGCONT.
			conn, err := sqlDB.Conn(context.Background())
			must(t, err)
			tx, err := conn.BeginTx(context.Background(), nil)
			must(t, err)
			must(t, tx.Rollback())
			say("stop me")
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				t.Errorf("the test's go-ahead: %v", err)
			}
			must(t, conn.Close())
		case p == relayhook.Done && batches == 1:
			say("done %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must(t, r.Run(relayhook.With(ctx, hook)))
}

// onlyThisTest is the -test.run pattern that picks t alone
// (^TestConformance$/^sqlite$/^relay$/^StoppedProcessPastItsLease$).
func onlyThisTest(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
