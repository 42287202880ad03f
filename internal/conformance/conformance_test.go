// Package conformance is Herald's conformance suite: the behaviour every
// storage implementation must show, run through the public API (outboxhook,
// relay, inbox, admin) against a real database. It sits above every package
// it tests, outside the storage package (whose drivers it reaches through the
// public API only), and runs itself on every database testkit knows
// (TestConformance), as TestConformance/<database>/<area>/<name>:
//
//	go test ./internal/conformance -run 'TestConformance/sqlite/relay/'
//
// It is made of test files only: nothing of it is built but by its own test.
//
// The drivers' own methods are exercised one by one by the driver-level
// suite, internal/store/drivertest, which each driver's package runs.
//
// It covers write-path atomicity in every GORM path the README lists (rollbacks,
// savepoints, Save's fallback insert, retries, caller-opened transactions),
// exactly-once writes, bad input, the relay's claims shared between instances,
// backoff and death, requeue, ordered leases and takeover, cleanup, the
// operator's requeues and purges racing each other and the relays' claims,
// and the inbox's deduplication under concurrent duplicates. Models:
// riverqueue/river's riverdrivertest, Watermill's pubsub/tests.
package conformance

import (
	"flag"
	"runtime"
	"strconv"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestMain runs the suite with -parallel 3 unless set (or the machine's
// cores, when more): its tests mostly wait (for a server, a lease, a
// timer), so more of them than two cores run side by side; more than 3 on
// two busy cores stretches the timing of those that measure it.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(max(3, runtime.GOMAXPROCS(0))))
	}
	// Every test on every database (CI) takes 5-11 minutes on two cores
	// beside the other packages' tests: past go test's default 10 minutes,
	// after which the go command kills the test binary whatever limit the
	// binary sets itself. The test command (README) gives 30 minutes.
	pgtest.Main(m)
}

// TestConformance runs the conformance suite on every database the tests run
// against (HERALD_TEST_DIALECTS picks some), in parallel. Without
// HERALD_LONG_TESTS (CI sets it) each test runs on one of those databases,
// taken in turn, so that every database meets a third of the suite and the
// README's test command stays short; CI runs every test on every database.
func TestConformance(t *testing.T) {
	dialects := testkit.Dialects()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		Run(t, d, func(i int) bool {
			return testkit.Long() || dialects[i%len(dialects)].Name == d.Name
		})
	})
}

type namedTest struct {
	name string
	f    func(t *testing.T, d testkit.Dialect)
}

// Run runs the suite against d, each test in parallel on a database of its
// own: the tests whose place in the suite (counted from 0 over all groups)
// runs accepts, the others skipped.
func Run(t *testing.T, d testkit.Dialect, runs func(i int) bool) {
	i := 0
	for _, group := range []struct {
		name  string
		tests []namedTest
	}{
		{"write", writeTests},
		{"inbox", inboxTests},
		{"relay", relayTests},
		{"admin", adminTests},
		{"schedule", scheduleTests},
		{"host", hostTests},
		{"fleet", fleetTests},
	} {
		first := i // counted here: t.Run skips the groups -run leaves out
		i += len(group.tests)
		t.Run(group.name, func(t *testing.T) {
			for j, tc := range group.tests {
				run := runs(first + j)
				t.Run(tc.name, func(t *testing.T) {
					if !run {
						t.Skip("without HERALD_LONG_TESTS=1 each conformance test runs on one database, here another")
					}
					t.Parallel()
					tc.f(t, d)
				})
			}
		})
	}
}
