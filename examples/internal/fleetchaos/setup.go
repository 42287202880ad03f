package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// fleetRole is the PostgreSQL role the fleet processes connect as: granted
// what they need in each tenant's schema, so that one tenant's grants can be
// revoked (the superuser's writers and consumers are not affected).
const fleetRole = "fleetchaos_fleet"

// controlSchema holds the members' table (fleet.Config.Members).
const controlSchema = "control"

// The tables of a tenant, besides the outbox and the relay's (relay.Setup) and
// the inbox (inbox.New): the accounts the writers save, the deposits they
// record in the same transactions (what committed, read at the end), and the
// consumers' effects (id: the order they were applied in).
var (
	postgresDDL = []string{
		`CREATE TABLE %s (id uuid PRIMARY KEY, version integer NOT NULL DEFAULT 0)`,
		`CREATE TABLE %s (event_id uuid PRIMARY KEY, account_id uuid NOT NULL, seq integer NOT NULL)`,
		`CREATE TABLE %s (id bigserial PRIMARY KEY, event_id uuid NOT NULL, account_id uuid NOT NULL, seq integer NOT NULL, consumer text NOT NULL)`,
	}
	sqliteDDL = []string{
		`CREATE TABLE %s (id TEXT PRIMARY KEY, version INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE %s (event_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, seq INTEGER NOT NULL)`,
		`CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, account_id TEXT NOT NULL, seq INTEGER NOT NULL, consumer TEXT NOT NULL)`,
	}
	mysqlDDL = []string{
		`CREATE TABLE %s (id CHAR(36) PRIMARY KEY, version INT NOT NULL DEFAULT 0)`,
		`CREATE TABLE %s (event_id CHAR(36) PRIMARY KEY, account_id CHAR(36) NOT NULL, seq INT NOT NULL)`,
		`CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, event_id CHAR(36) NOT NULL, account_id CHAR(36) NOT NULL, seq INT NOT NULL, consumer VARCHAR(64) NOT NULL)`,
	}
	ddlTables = []string{"accounts", "deposits", "effects"}
)

// quiet is the gorm configuration of every handle of the run: no logging, no
// ping at open (the server may be down).
func quiet() *gorm.Config {
	return &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true}
}

// userDSN is dsn (a URL) with user instead of its own.
func userDSN(dsn, user string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic("fleetchaos: DSN is not a URL: " + err.Error())
	}
	u.User = url.User(user)
	return u.String()
}

// sqliteOpen opens an SQLite tenant's file with Herald's DSN.
func sqliteOpen(path string) (*gorm.DB, error) {
	return testkit.OpenSQLite(testkit.SQLiteDSN(path), quiet())
}

// onPool is a gorm handle on an open pool (one per tenant, all on one pool):
// its tables are the tenant's (a prefix: "tenant_007.").
func onPool(db *gorm.DB, prefix string) (*gorm.DB, error) {
	s, err := db.DB()
	if err != nil {
		return nil, err
	}
	cfg := quiet()
	cfg.NamingStrategy = schema.NamingStrategy{TablePrefix: prefix}
	return gorm.Open(postgres.New(postgres.Config{Conn: s}), cfg)
}

// setupRoles makes the fleet's role and the control schema.
func setupRoles(ctx context.Context, adm *gorm.DB) error {
	for _, q := range []string{
		`CREATE ROLE ` + fleetRole + ` LOGIN`,
		`CREATE SCHEMA ` + controlSchema,
		`GRANT USAGE, CREATE ON SCHEMA ` + controlSchema + ` TO ` + fleetRole,
	} {
		if err := adm.WithContext(ctx).Exec(q).Error; err != nil {
			return fmt.Errorf("setup: %s: %w", q, err)
		}
	}
	return nil
}

// grants are what the fleet's role needs in a tenant's schema (revoke: the
// statements that take them back).
func grants(schema string, revoke bool) []string {
	if revoke {
		return []string{
			`REVOKE ALL ON ALL TABLES IN SCHEMA ` + schema + ` FROM ` + fleetRole,
			`REVOKE ALL ON ALL SEQUENCES IN SCHEMA ` + schema + ` FROM ` + fleetRole,
			`REVOKE USAGE ON SCHEMA ` + schema + ` FROM ` + fleetRole,
		}
	}
	return []string{
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + fleetRole,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + fleetRole,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + fleetRole,
	}
}

// nopPublisher is the publisher of the relays the orchestrator makes only to
// set the tables up (relay.Setup): never run.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error {
	return errors.New("fleetchaos: not a publishing relay")
}
func (nopPublisher) Close() error { return nil }

// setupTenant makes tenant t's tables on db (a schema's: db is the
// superuser's pool; SQLite, MariaDB: the tenant's database's).
func setupTenant(ctx context.Context, db *gorm.DB, t tenantRef) error {
	fail := func(what string, err error) error { return fmt.Errorf("setup %s: %s: %w", t.ID, what, err) }
	ddl := sqliteDDL
	if t.MySQL != "" {
		ddl = mysqlDDL
	}
	if t.schema() {
		ddl = postgresDDL
		if err := db.WithContext(ctx).Exec(`CREATE SCHEMA ` + t.ID).Error; err != nil {
			return fail("schema", err)
		}
	}
	// The outbox and the ordered relay's tables, before the fleets' relays
	// race to make them (they may not: the fleet's role has no DDL rights).
	r, err := relay.New(db, nopPublisher{}, relay.Config{Table: t.qualify("outbox_messages"), Ordered: true, Logger: discard()})
	if err != nil {
		return fail("relay", err)
	}
	if err := r.Setup(ctx); err != nil {
		return fail("relay setup", err)
	}
	for i, q := range ddl {
		if err := db.WithContext(ctx).Exec(fmt.Sprintf(q, t.qualify(ddlTables[i]))).Error; err != nil {
			return fail(ddlTables[i], err)
		}
	}
	for _, cols := range []string{"account_id, seq", "event_id"} {
		name := strings.NewReplacer(", ", "_").Replace(cols)
		if err := db.WithContext(ctx).Exec(`CREATE INDEX effects_` + name + ` ON ` + t.qualify("effects") + ` (` + cols + `)`).Error; err != nil {
			return fail("effects index", err)
		}
	}
	if _, err := inbox.New(db, inbox.Config{Table: t.qualify("inbox_messages"), Logger: discard()}); err != nil {
		return fail("inbox", err)
	}
	return nil
}

// finishTenant makes tenant t's accounts, one per writer, and (a schema)
// grants the fleet's role what it needs; it returns the accounts' ids.
func finishTenant(ctx context.Context, db *gorm.DB, t tenantRef, writers int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, writers)
	var (
		values []string
		args   []any
	)
	for i := range ids {
		ids[i] = uuid.New()
		values, args = append(values, "(?, 0)"), append(args, ids[i].String())
	}
	if err := db.WithContext(ctx).Exec(`INSERT INTO `+t.qualify("accounts")+` (id, version) VALUES `+strings.Join(values, ", "), args...).Error; err != nil {
		return nil, fmt.Errorf("setup %s: accounts: %w", t.ID, err)
	}
	if t.schema() {
		for _, q := range grants(t.ID, false) {
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return nil, fmt.Errorf("setup %s: grants: %w", t.ID, err)
			}
		}
	}
	return ids, nil
}

// templateSQL dumps schema (made by setupTenant) as SQL that makes it again
// (pg_dump --inserts, without the session settings and psql's commands), to
// make the other schemas from, much faster than setupTenant on a busy
// machine: the same tables, indexes, sequences and rows, the schema's name
// replaced. Empty, with no pg_dump.
func templateSQL(ctx context.Context, dsn, schema string) (string, error) {
	bin := "pg_dump"
	if dir := os.Getenv("PG_BIN"); dir != "" {
		bin = filepath.Join(dir, bin)
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", nil //nolint:nilerr // no pg_dump: each schema is made by setupTenant
	}
	out, err := exec.CommandContext(ctx, path, "--schema="+schema, "--inserts", "--no-owner", "--no-privileges", "--dbname="+dsn).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("pg_dump: %w", err)
	}
	// A table's rows (the aggregate lock table's 65,536) are copied from the
	// template's, in one statement (templateSource stands for its schema).
	var (
		keep   []string
		copied = map[string]bool{}
		insert = "INSERT INTO " + schema + "."
	)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "SET ") || strings.HasPrefix(line, "SELECT pg_catalog.set_config(") || strings.HasPrefix(line, `\`) {
			continue
		}
		if rest, ok := strings.CutPrefix(line, insert); ok {
			table, _, _ := strings.Cut(rest, " ")
			if !copied[table] {
				copied[table] = true
				keep = append(keep, insert+table+" SELECT * FROM "+templateSource+"."+table+";")
			}
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n"), nil
}

// templateSource stands for the template's schema in templateSQL, as the
// source of the rows copied.
const templateSource = "{{template}}"

// setupTenants makes every tenant, four at a time, and returns each one's
// accounts. The first schema is made by setupTenant, the others from its
// dump (templateSQL), when pg_dump is there. The MariaDB tenants' databases
// on mysqlServer must be there (createMySQL).
func setupTenants(ctx context.Context, adm *gorm.DB, dsn, mysqlServer string, tenants []tenantRef, writers int) (map[string][]uuid.UUID, error) {
	var template string
	if len(tenants) > 0 && tenants[0].schema() {
		if err := setupTenant(ctx, adm, tenants[0]); err != nil {
			return nil, err
		}
		var err error
		if template, err = templateSQL(ctx, dsn, tenants[0].ID); err != nil {
			return nil, err
		}
	}
	make1 := func(t tenantRef, i int) ([]uuid.UUID, error) {
		db := adm
		if !t.schema() {
			var err error
			if db, err = t.open(mysqlServer); err != nil {
				return nil, err
			}
			defer closeDB(db)
		}
		switch {
		case i == 0 && t.schema(): // made above
		case t.schema() && template != "":
			q := strings.ReplaceAll(strings.ReplaceAll(template, tenants[0].ID, t.ID), templateSource, tenants[0].ID)
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return nil, fmt.Errorf("setup %s: from %s's dump: %w", t.ID, tenants[0].ID, err)
			}
		default:
			if err := setupTenant(ctx, db, t); err != nil {
				return nil, err
			}
		}
		return finishTenant(ctx, db, t, writers)
	}
	var (
		mu       sync.Mutex
		accounts = map[string][]uuid.UUID{}
		errs     []error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				ids, err := make1(tenants[i], i)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				accounts[tenants[i].ID] = ids
				mu.Unlock()
			}
		})
	}
	for i := range tenants {
		next <- i
	}
	close(next)
	wg.Wait()
	return accounts, errors.Join(errs...)
}

// tenantRefs are the run's tenants: the schemas, the SQLite files, then the
// MariaDB databases (named from prefix, the run's own).
func tenantRefs(o options, dir, prefix string) []tenantRef {
	var out []tenantRef
	for i := range o.tenants {
		out = append(out, tenantRef{ID: fmt.Sprintf("tenant_%03d", i)})
	}
	for i := range o.sqliteTenants {
		id := fmt.Sprintf("sqlite_%02d", i)
		out = append(out, tenantRef{ID: id, File: filepath.Join(dir, id+".db")})
	}
	for i := range o.mysqlTenants {
		id := fmt.Sprintf("mysql_%02d", i)
		out = append(out, tenantRef{ID: id, MySQL: prefix + id})
	}
	return out
}

// createMySQL makes the MariaDB tenants' databases on server and returns a
// function that drops them.
func createMySQL(ctx context.Context, server string, refs []tenantRef) (func(), error) {
	var names []string
	for _, t := range refs {
		if t.MySQL != "" {
			names = append(names, t.MySQL)
		}
	}
	if len(names) == 0 {
		return func() {}, nil
	}
	adm, err := sql.Open("mysql", mysqltest.DSN(server, ""))
	if err != nil {
		return nil, err
	}
	var made []string
	drop := func() {
		for _, n := range made {
			if _, err := adm.Exec("DROP DATABASE IF EXISTS `" + n + "`"); err != nil {
				fmt.Fprintf(os.Stderr, "fleetchaos: drop database %s: %v\n", n, err)
			}
		}
		_ = adm.Close()
	}
	for _, n := range names {
		if _, err := adm.ExecContext(ctx, "CREATE DATABASE `"+n+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			drop()
			return nil, fmt.Errorf("MariaDB at %s: create database %s: %w", server, n, err)
		}
		made = append(made, n)
	}
	return drop, nil
}

// viaProxy is the go-sql-driver DSN server with its address replaced by addr.
func viaProxy(server, addr string) (string, error) {
	cfg, err := gomysql.ParseDSN(server)
	if err != nil {
		return "", err
	}
	cfg.Addr = addr
	return cfg.FormatDSN(), nil
}

// mysqlAddr is the host:port of the go-sql-driver DSN server.
func mysqlAddr(server string) (string, error) {
	cfg, err := gomysql.ParseDSN(server)
	if err != nil {
		return "", err
	}
	return cfg.Addr, nil
}

// makeStream creates the run's stream (named after its one subject, as
// natsjs.DefaultStreamConfig names it) and returns a function that deletes it.
func makeStream(ctx context.Context, url, topic string) (func(), error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sc := natsjs.DefaultStreamConfig(topic)
	if _, err := js.CreateStream(ctx, sc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("create stream %s: %w", sc.Name, err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(dctx, sc.Name); err != nil {
			fmt.Fprintf(os.Stderr, "fleetchaos: delete stream %s: %v\n", sc.Name, err)
		}
		nc.Close()
	}, nil
}

// openServerPool opens the superuser's pool on the server, named app in
// pg_stat_activity, with at most n connections.
func openServerPool(dsn, app string, n int) (*gorm.DB, error) {
	db, err := pgtest.OpenPool(pgtest.WithHost(dsn, "", app))
	if err != nil {
		return nil, err
	}
	s, err := db.DB()
	if err != nil {
		return nil, err
	}
	s.SetMaxOpenConns(n)
	s.SetMaxIdleConns(n)
	return db, nil
}

// closeDB closes db's pool.
func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}
