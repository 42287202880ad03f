package e2e

import (
	"context"
	"database/sql"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/relay"
)

// A relay role with exactly the grants docs/operating.md lists (no DDL
// right: no CREATE on the schema or database, which CREATE TABLE IF NOT
// EXISTS needs even when the table exists) records its heartbeat in the
// instance table the migrations made, in either mode, so that the admin page
// and herald status see it; on PostgreSQL and MySQL (SQLite has no
// privileges). A heartbeat that fails is retried: started before the
// instance table exists (the role may not make it), the relay beats once the
// table is made and granted.
func TestLeastPrivilegeHeartbeat(t *testing.T) {
	for _, db := range []struct {
		d     testkit.Dialect
		grant func(t *testing.T, relays bool, ordered bool) (dsn string, grantRelays func(), rows func() []string)
	}{
		{testkit.Postgres, pgRelayRole},
		{testkit.MySQL, mysqlRelayRole},
	} {
		t.Run(db.d.Name, func(t *testing.T) {
			t.Parallel()
			for _, ordered := range []bool{false, true} {
				t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
					t.Parallel()
					dsn, _, rows := db.grant(t, true, ordered)
					runRelay(t, db.d, dsn, ordered, slog.New(slog.DiscardHandler))
					wantHeartbeat(t, rows, 15*time.Second)
				})
			}
			t.Run("retried", func(t *testing.T) {
				t.Parallel()
				dsn, grantRelays, rows := db.grant(t, false, false)
				warned := make(warnings, 16)
				stop := runRelay(t, db.d, dsn, false, slog.New(warned))
				for failed := false; !failed; { // until the first heartbeat failed
					select {
					case m := <-warned:
						failed = strings.Contains(m, "heartbeat") || strings.Contains(m, "instance table")
					case <-time.After(15 * time.Second):
						t.Fatal("no warning of a failed heartbeat without the instance table")
					}
				}
				grantRelays()
				wantHeartbeat(t, rows, 30*time.Second)
				stop()
			})
		})
	}
}

const heartbeatInstance = "least-privilege"

// runRelay runs a relay on dsn, a database of d's, until the test ends or
// stop.
func runRelay(t *testing.T, d testkit.Dialect, dsn string, ordered bool, log *slog.Logger) (stop func()) {
	t.Helper()
	db := d.Open(t, dsn, nil)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(db, gc, relay.Config{PollInterval: 20 * time.Millisecond, DisableListen: true, Ordered: ordered,
		LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, InstanceID: heartbeatInstance,
		Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, stop = testkit.Run(t, r.Run)
	t.Cleanup(stop)
	return stop
}

// wantHeartbeat waits for the relay's row in the instance table (rows).
func wantHeartbeat(t *testing.T, rows func() []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, r := range rows() {
			if r == heartbeatInstance {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat row of the relay after %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pgRelayRole makes a schema with every migration and a relay role with the
// grants docs/operating.md lists, and returns the role's DSN and the
// instance table's rows, read as the administrator. Without relays the
// instance table is dropped, and made and granted at grantRelays.
func pgRelayRole(t *testing.T, relays, ordered bool) (string, func(), func() []string) {
	schema, dsn := pgtest.Schema(t)
	admin := pgtest.Admin(t)
	role := pgtest.Name("herald_hb_")
	var stmts []string
	files, err := fs.Glob(migrations.Postgres(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(migrations.Postgres(), f)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b))
	}
	grantRelays := []string{
		`CREATE TABLE IF NOT EXISTS outbox_messages_relays (instance text PRIMARY KEY, seen_at timestamptz NOT NULL)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_messages_relays TO ` + role,
	}
	stmts = append(stmts,
		`CREATE ROLE `+role+` LOGIN`,
		`GRANT USAGE ON SCHEMA `+schema+` TO `+role,
		`GRANT SELECT, UPDATE, DELETE ON outbox_messages TO `+role,
	)
	if relays {
		stmts = append(stmts, grantRelays...)
	} else {
		stmts = append(stmts, `DROP TABLE outbox_messages_relays`)
	}
	if ordered {
		stmts = append(stmts, `GRANT SELECT, INSERT, UPDATE ON outbox_messages_leases TO `+role)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(`DROP OWNED BY ` + role)
		_, _ = admin.Exec(`DROP ROLE ` + role)
	})
	pgExec(t, admin, schema, stmts...)
	rows := func() []string {
		return instances(t, admin, `SELECT instance FROM `+schema+`.outbox_messages_relays`)
	}
	return strings.Replace(dsn, "postgres@", role+"@", 1), func() { pgExec(t, admin, schema, grantRelays...) }, rows
}

// pgExec runs stmts as the administrator, in schema.
func pgExec(t *testing.T, admin *sql.DB, schema string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET search_path = `+schema); err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// mysqlRelayRole is pgRelayRole on MySQL: a database migrated by the
// server's administrator and a user with the grants docs/operating.md lists.
func mysqlRelayRole(t *testing.T, relays, ordered bool) (string, func(), func() []string) {
	dsn := testkit.MySQL.NewDSN(t)
	if _, err := migrations.Migrate(context.Background(), testkit.MySQL.Open(t, dsn, &gorm.Config{})); err != nil {
		t.Fatal(err)
	}
	admin := mysqltest.Admin(t)
	name := dsn[strings.LastIndex(dsn[:strings.IndexByte(dsn, '?')], "/")+1 : strings.IndexByte(dsn, '?')]
	user := pgtest.Name("herald_hb_")
	on := func(table string) string { return "`" + name + "`.`" + table + "`" }
	grantRelays := []string{
		`CREATE TABLE IF NOT EXISTS ` + on("outbox_messages_relays") + ` (instance VARCHAR(255) NOT NULL PRIMARY KEY, seen_at DATETIME(6) NOT NULL)
ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + on("outbox_messages_relays") + ` TO '` + user + `'@'%'`,
	}
	stmts := []string{
		`CREATE USER '` + user + `'@'%'`,
		`GRANT SELECT, UPDATE, DELETE ON ` + on("outbox_messages") + ` TO '` + user + `'@'%'`,
	}
	if relays {
		stmts = append(stmts, grantRelays...)
	} else {
		stmts = append(stmts, `DROP TABLE `+on("outbox_messages_relays"))
	}
	if ordered {
		stmts = append(stmts, `GRANT SELECT, INSERT, UPDATE ON `+on("outbox_messages_leases")+` TO '`+user+`'@'%'`)
	}
	t.Cleanup(func() { _, _ = admin.Exec(`DROP USER IF EXISTS '` + user + `'@'%'`) })
	myExec(t, admin, stmts...)
	rows := func() []string {
		return instances(t, admin, `SELECT instance FROM `+on("outbox_messages_relays"))
	}
	// The user's DSN: the server's, its user part replaced.
	at := strings.IndexByte(dsn, '@')
	return user + dsn[at:], func() { myExec(t, admin, grantRelays...) }, rows
}

func myExec(t *testing.T, admin *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// instances runs q, which reads the instance column of the instance table.
func instances(t *testing.T, admin *sql.DB, q string) []string {
	t.Helper()
	rows, err := admin.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// warnings is a slog.Handler that sends the message of each warning or
// error, when the channel has room, and drops every other record.
type warnings chan string

func (w warnings) Enabled(context.Context, slog.Level) bool { return true }

func (w warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		select {
		case w <- r.Message:
		default:
		}
	}
	return nil
}

func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }
