package conformance

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// skipWithoutMySQL skips the test when HERALD_TEST_DIALECTS leaves MySQL out.
func skipWithoutMySQL(t *testing.T) {
	t.Helper()
	if !slices.ContainsFunc(testkit.Dialects(), func(d testkit.Dialect) bool { return d.Name == "mysql" }) {
		t.Skip("HERALD_TEST_DIALECTS leaves MySQL out")
	}
}

// withLoc is dsn with its loc set to loc.
func withLoc(dsn, loc string) string {
	return strings.Replace(dsn, "loc=UTC", "loc="+url.QueryEscape(loc), 1)
}

// checkLoc opens dsn and reports what the public constructors make of it: each
// refuses it with mysql.ErrLoc, or each accepts it and an event scheduled at
// a set time is listed as due at that time (the times read correctly).
func checkLoc(t *testing.T, dsn string, refused bool) {
	t.Helper()
	db, err := gorm.Open(gormmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	checkLocOf(t, db, refused)
}

// checkLocConn is checkLoc for a dialector opened on an existing connection,
// which shows no DSN.
func checkLocConn(t *testing.T, dsn string, refused bool) {
	t.Helper()
	checkLocOf(t, testkit.OpenMySQLOnConn(t, dsn), refused)
}

func checkLocOf(t *testing.T, db *gorm.DB, refused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	var accepted, refusals []string
	note := func(what string, err error) {
		switch {
		case err == nil:
			accepted = append(accepted, what)
		case errors.Is(err, mysql.ErrLoc):
			refusals = append(refusals, what)
			if !strings.Contains(err.Error(), "loc=UTC") {
				t.Errorf("%s: %v does not name the setting", what, err)
			}
		default:
			t.Errorf("%s: %v", what, err)
		}
	}
	note("db.Use", db.Use(outboxhook.New(outboxhook.Config{})))
	_, err = relay.New(db, testkit.NewGoChannel(), relay.Config{})
	note("relay.New", err)
	_, err = inbox.New(db, inbox.Config{})
	note("inbox.New", err)
	adm, err := admin.New(db, admin.Config{})
	note("admin.New", err)
	if len(refusals) > 0 {
		if len(accepted) > 0 {
			t.Fatalf("refused by %v, accepted by %v", refusals, accepted)
		}
		if !refused {
			t.Fatalf("a DSN Herald works with is refused by %v", refusals)
		}
		t.Logf("refused by %v", refusals)
		return
	}
	if t.Failed() {
		return
	}
	// Accepted: the times must read as they were written.
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	id := uuid.New()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Schedule(tx, events.At(due), OrderPlaced{OrderID: id})
	}))
	list, err := adm.Outbox().Scheduled(ctx, admin.ScheduledFilter{}, 10)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("scheduled events: %d, want 1", len(list))
	}
	if got := list[0].DueAt; !got.Equal(due) {
		t.Fatalf("an event scheduled at %s is listed as due at %s (%s off)", due, got.UTC(), got.Sub(due))
	}
	if refused {
		t.Logf("accepted, and the times read correctly")
	}
}

// A MySQL DSN whose loc is a zone with an offset shifts every time Herald
// writes as an argument (occurred_at, due times) and reads (the admin's
// due, failing and dead times): Herald refuses it at db.Use, relay.New,
// inbox.New and admin.New, naming the setting; loc=UTC works, whatever the
// session's time_zone.
func TestMySQLDSNLoc(t *testing.T) {
	skipWithoutMySQL(t)
	t.Parallel()
	for _, loc := range []string{"America/New_York", "Asia/Kolkata", "Europe/London"} {
		t.Run(loc, func(t *testing.T) { checkLoc(t, withLoc(mysqltest.Database(t), loc), true) })
	}
	t.Run("UTC", func(t *testing.T) { checkLoc(t, mysqltest.Database(t), false) })
	t.Run("America/New_York/Conn", func(t *testing.T) {
		checkLocConn(t, withLoc(mysqltest.Database(t), "America/New_York"), true)
	})
	t.Run("UTC/Conn", func(t *testing.T) { checkLocConn(t, mysqltest.Database(t), false) })
	// A session time_zone other than UTC changes nothing: Herald's clock is
	// UTC_TIMESTAMP(6), and no statement converts a time by the session's zone.
	t.Run("SessionTimeZone", func(t *testing.T) {
		checkLoc(t, mysqltest.Database(t)+"&time_zone="+url.QueryEscape("'+05:30'"), false)
	})
}

// loc=Local is the host's zone: refused where it has an offset (the test runs
// itself again with TZ set), accepted where the host is in UTC.
func TestMySQLDSNLocLocal(t *testing.T) {
	skipWithoutMySQL(t)
	if dsn := os.Getenv("HERALD_TEST_LOC_LOCAL_DSN"); dsn != "" {
		checkLoc(t, dsn, os.Getenv("TZ") != "UTC")
		return
	}
	t.Parallel()
	for _, tz := range []string{"Asia/Kolkata", "America/New_York", "UTC"} {
		t.Run(tz, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMySQLDSNLocLocal$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "TZ="+tz, "HERALD_TEST_LOC_LOCAL_DSN="+withLoc(mysqltest.Database(t), "Local"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("with TZ=%s: %v\n%s", tz, err, out)
			}
			t.Log(strings.TrimSpace(string(out)))
		})
	}
}
