package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

// The databases the chaos run knows. Everything the run does differently on
// each is here: how it makes a database of its own and drops it, how a
// process opens it, how often relays poll, the little SQL the ledger cannot
// say portably, and the fault that cuts the relays' and consumers' sessions.
const (
	postgresDB = "postgres"
	sqliteDB   = "sqlite"
	mysqlDB    = "mysql"
)

// dialect is the database-specific part of the ledger's SQL, which otherwise
// goes through GORM (its ? placeholders) or relay.Stats and relay.Dead.
type dialect struct {
	// now is the database's current time, in the type of its time columns.
	now string
	// secs is the SQL for the seconds from time earlier to time later.
	secs func(later, earlier string) string
	// poll is the relays' PollInterval. With LISTEN/NOTIFY (PostgreSQL) it is
	// only the fallback; without, it is how an event committed in the
	// orchestrator reaches a relay in another process.
	poll time.Duration
	// writeRate is the writers' default -write-rate (0: no limit).
	writeRate int
	// accountsDDL creates the accounts table where GORM's AutoMigrate cannot
	// (MySQL 8 has no uuid type); empty: AutoMigrate.
	accountsDDL string
}

var dialects = map[string]dialect{
	postgresDB: {
		now:  `now()`,
		secs: func(l, e string) string { return `extract(epoch FROM ` + l + ` - ` + e + `)` },
		poll: 200 * time.Millisecond,
	},
	sqliteDB: { // times are integer unix microseconds
		now:  `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,
		secs: func(l, e string) string { return `((` + l + `) - (` + e + `)) / 1e6` },
		poll: 100 * time.Millisecond,
		// One write lock for all: here about 1,200 transactions/s, whoever
		// asks. Every event costs a writer's transaction and a consumer's;
		// unpaced, 8 writers take half of it, the consumers fall behind by
		// ~25,000 events in 90s and barely drain in 30s. At 400/s the
		// consumers keep up, and catch up after each outage.
		writeRate: 400,
	},
	mysqlDB: { // times are UTC DATETIME(6)
		now:         `UTC_TIMESTAMP(6)`,
		secs:        func(l, e string) string { return `TIMESTAMPDIFF(MICROSECOND, ` + e + `, ` + l + `) / 1e6` },
		poll:        100 * time.Millisecond,
		accountsDDL: "CREATE TABLE accounts (id CHAR(36) NOT NULL PRIMARY KEY, version BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	},
}

// database is the run's own database: made at the start, dropped at the end.
type database struct {
	kind  string // postgresDB, sqliteDB or mysqlDB
	where string // what it is, for the table
	dsn   string // the orchestrator's (writers, ledger)
	// childDSN is the relays' and consumers' (on MySQL, another user, so that
	// the connection fault finds their sessions and no others).
	childDSN string
	// cut ends every database session of the relays and consumers and
	// returns how many; nil where there is no such thing (SQLite).
	cut func() (int64, error)
	// cutLabel names the fault in the table; cutNA says why it does not apply.
	cutLabel, cutNA string
	drop            func()
}

func (d *database) dialect() dialect { return dialects[d.kind] }

// parseDB reads the -db flag: a dialect's name, or a server's URL
// (postgres://..., mysql://user:pass@host:port) on which the run makes a
// database of its own. It returns the kind and the server (empty: the default
// of the test kit).
func parseDB(v string) (kind, server string, err error) {
	switch v {
	case postgresDB, "postgresql", "pg":
		return postgresDB, "", nil
	case sqliteDB, "sqlite3":
		return sqliteDB, "", nil
	case mysqlDB, "mariadb":
		return mysqlDB, "", nil
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("-db %q: want postgres, sqlite, mysql, or a postgres:// or mysql:// URL", v)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return postgresDB, v, nil
	case "mysql", "mariadb":
		// go-sql-driver's form: user:pass@tcp(host:port)/?params
		c := gomysql.NewConfig()
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
		c.Net, c.Addr = "tcp", u.Host
		return mysqlDB, c.FormatDSN(), nil
	}
	return "", "", fmt.Errorf("-db %q: unknown scheme %q", v, u.Scheme)
}

// setup makes the run's database: a schema (PostgreSQL), a file in dir
// (SQLite), or a database and a user for the children (MySQL).
func setup(kind, server, dir string) (*database, error) {
	switch kind {
	case postgresDB:
		return setupPostgres(server)
	case sqliteDB:
		path := filepath.Join(dir, "chaos.db")
		return &database{kind: kind, where: "SQLite file " + path + " (WAL)", dsn: testkit.SQLiteDSN(path), childDSN: testkit.SQLiteDSN(path),
			cutLabel: "database sessions cut", cutNA: "n/a on sqlite (no server, no sessions to end: the SIGKILLs are the nearest fault)",
			drop: func() {}}, nil
	case mysqlDB:
		return setupMySQL(server)
	}
	return nil, fmt.Errorf("unknown database %q", kind)
}

func setupPostgres(server string) (*database, error) {
	if server == "" {
		server = pgtest.DSN()
	}
	admin, err := sql.Open("pgx", server)
	if err != nil {
		return nil, err
	}
	schema := pgtest.Name("herald_chaos_")
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", server, err)
	}
	dsn := pgtest.WithSearchPath(server, schema)
	return &database{kind: postgresDB, where: "PostgreSQL, schema " + schema, dsn: dsn, childDSN: dsn,
		cutLabel: "PostgreSQL backends terminated",
		cut: func() (int64, error) {
			var n int64
			err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name LIKE 'chaos_relay_%' OR application_name LIKE 'chaos_consumer_%'`).Scan(&n)
			return n, err
		},
		drop: func() {
			_, _ = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
			_ = admin.Close()
		}}, nil
}

// setupMySQL makes a database and a user of the run's own; the relays and
// consumers connect as that user, so that the processlist tells their
// sessions (user and database) from the orchestrator's. Without the privilege
// to create users, they connect as the orchestrator does, and the fault cuts
// every session of the run's database but the orchestrator's... which it
// cannot tell apart: the writers' sessions are cut too.
func setupMySQL(server string) (*database, error) {
	if server == "" {
		server = testkit.MySQLServer()
	}
	admin, err := sql.Open("mysql", testkit.MySQLDSN(server, ""))
	if err != nil {
		return nil, err
	}
	name := pgtest.Name("herald_chaos_")
	if _, err := admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("cannot reach MySQL at %s: %w", server, err)
	}
	d := &database{kind: mysqlDB, dsn: testkit.MySQLDSN(server, name), cutLabel: "MySQL sessions of the relays and consumers killed (KILL)"}
	var drops []string
	d.drop = func() {
		for _, q := range drops {
			_, _ = admin.Exec(q)
		}
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		_ = admin.Close()
	}
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	pass := hex.EncodeToString(pw)
	user := name
	err = execSQL(admin, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+pass+"'")
	if err == nil {
		err = execSQL(admin, "GRANT ALL PRIVILEGES ON `"+name+"`.* TO '"+user+"'@'%'")
	}
	if err == nil {
		drops = append(drops, "DROP USER IF EXISTS '"+user+"'@'%'")
		c, perr := gomysql.ParseDSN(d.dsn)
		if perr != nil {
			d.drop()
			return nil, perr
		}
		c.User, c.Passwd = user, pass
		d.childDSN = c.FormatDSN()
		d.where = "MySQL database " + name + " (relays and consumers as user " + user + ")"
	} else {
		_, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'")
		c, _ := gomysql.ParseDSN(d.dsn)
		user = c.User
		d.childDSN = d.dsn
		d.where = "MySQL database " + name + " (cannot create a user: " + err.Error() + ")"
		d.cutLabel = "MySQL sessions of the run's database killed (KILL; the writers' too: no user of the run's own)"
	}
	d.cut = func() (int64, error) {
		ids, err := queryIDs(admin, `SELECT id FROM information_schema.processlist WHERE user = ? AND db = ? AND id <> CONNECTION_ID()`, user, name)
		if err != nil {
			return 0, err
		}
		var n int64
		for _, id := range ids {
			// A session may end by itself meanwhile (a killed process).
			if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
				n++
			}
		}
		return n, nil
	}
	return d, nil
}

func execSQL(db *sql.DB, q string) error {
	_, err := db.Exec(q)
	return err
}

func queryIDs(db *sql.DB, q string, args ...any) ([]int64, error) {
	rows, err := db.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// openDB opens GORM on dsn, a database of kind, for a process of the run
// named app: no logging, no ping at open (the database may be down), and a
// pool that keeps idle connections for its concurrent callers.
func openDB(kind, dsn, app string) (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true}
	var (
		db  *gorm.DB
		err error
	)
	switch kind {
	case postgresDB:
		return pgtest.OpenPool(pgtest.WithHost(dsn, "", app))
	case sqliteDB:
		// Timed: who holds the write lock while a save waits (locks.go).
		db, err = gorm.Open(sqlite.New(sqlite.Config{DriverName: timedSQLite(app), DSN: dsn}), cfg)
	case mysqlDB:
		if os.Getenv("CHAOS_LOG") == "" {
			// The driver logs every session the connection fault ends.
			_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
		}
		db, err = gorm.Open(mysql.Open(dsn), cfg)
	default:
		return nil, fmt.Errorf("unknown database %q", kind)
	}
	if err != nil {
		return nil, err
	}
	s, err := db.DB()
	if err != nil {
		return nil, err
	}
	s.SetMaxIdleConns(64)
	if kind == sqliteDB && app != "chaos_ledger" {
		// One writer at a time: a process's goroutines queue for its one
		// connection in Go, in turn, instead of in SQLite's busy handler,
		// whose sleeps (1ms, growing to 100ms) leave the lock idle and hand
		// it to whoever asks again first. With a pool of many, the
		// writers' hot loop starved the consumers: 20,000 events behind
		// after 30s, and the drain took over 30s.
		// The ledger's reads (WAL: they never wait for the writer) keep a
		// pool of many.
		s.SetMaxOpenConns(1)
	}
	return db, nil
}

// closeDB closes db's pool.
func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}

// migrateModels creates the chaos run's own tables: the accounts, the
// consumers' effects, the scheduled events' reminders.
func migrateModels(ctx context.Context, db *gorm.DB, d dialect) error {
	if d.accountsDDL != "" {
		if err := db.WithContext(ctx).Exec(d.accountsDDL).Error; err != nil {
			return err
		}
		return db.WithContext(ctx).AutoMigrate(&Effect{}, &Reminder{})
	}
	return db.WithContext(ctx).AutoMigrate(&Account{}, &Effect{}, &Reminder{})
}

// describeKind names the database and how relays learn of events.
func describeKind(d *database, poll time.Duration) string {
	if d.kind == postgresDB {
		return fmt.Sprintf("%s; LISTEN/NOTIFY wakes the relays, which also poll every %v", d.where, poll)
	}
	return fmt.Sprintf("%s; no LISTEN/NOTIFY: the relays poll every %v", d.where, poll)
}
