package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"gorm.io/gorm"
)

// ownerTable marks a PostgreSQL schema or MySQL database as this example's:
// made by a run, which alone may drop it.
const ownerTable = "herald_example_owner"

// claimSchema says, before anything is dropped, what the run is about to do
// with the schema (PostgreSQL) or database (MySQL) it works in: create it, or
// DROP and recreate it. It refuses to drop one the example did not create:
// one without ownerTable, however empty (a new database's "public" is). Nothing to say for SQLite (a
// temporary file). A server it cannot reach is left to exampledb.Open to
// report.
func claimSchema(ctx context.Context, dbURL, schema string) error {
	if dbURL != "" && reserved(schema) {
		return fmt.Errorf("-schema %s is a database's own schema: this example drops and recreates its schema, and never that one", schema)
	}
	var (
		driver, dsn, kind string
		exists, tables    string
	)
	switch {
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		driver, dsn, kind = "pgx", dbURL, "PostgreSQL schema"
		exists = `SELECT count(*) FROM pg_namespace WHERE nspname = $1`
		tables = `SELECT count(*), count(*) FILTER (WHERE c.relname = '` + ownerTable + `')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')`
	case strings.HasPrefix(dbURL, "mysql://"):
		u, err := url.Parse(dbURL)
		if err != nil {
			return nil // exampledb.Open says why
		}
		host := u.Host
		if u.Port() == "" {
			host += ":3306"
		}
		driver, dsn, kind = "mysql", u.User.String()+"@tcp("+host+")/", "MySQL database"
		exists = `SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?`
		tables = `SELECT count(*), COALESCE(SUM(table_name = '` + ownerTable + `'), 0) FROM information_schema.tables WHERE table_schema = ?`
	default:
		return nil
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil
	}
	defer func() { _ = db.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if db.PingContext(ctx) != nil {
		return nil // exampledb.Open says why
	}
	var n, all, marked int // the schema exists; its tables; ownerTable among them
	if err := db.QueryRowContext(ctx, exists, schema).Scan(&n); err != nil {
		return fmt.Errorf("look up %s %s: %w", kind, schema, err)
	}
	if n == 0 {
		fmt.Printf("creating the %s %s, this example's own (a later run drops and recreates it)\n", kind, schema)
		return nil
	}
	if err := db.QueryRowContext(ctx, tables, schema).Scan(&all, &marked); err != nil {
		return fmt.Errorf("look up %s %s: %w", kind, schema, err)
	}
	if marked == 0 { // empty or not: "public" is empty on a new database, and not the example's
		return fmt.Errorf("the %s %s exists (%d tables) and this example did not create it (it has no %s table): "+
			"refusing to drop it; pick another -schema, or drop it yourself", kind, schema, all, ownerTable)
	}
	fmt.Printf("DROPPING the %s %s (this example's own, from an earlier run: everything in it is lost) and creating it afresh\n", kind, schema)
	return nil
}

// markSchema makes ownerTable in the schema db works in: a later run may drop
// it.
func markSchema(db *gorm.DB) error {
	if err := db.Exec(`CREATE TABLE ` + ownerTable + ` (note varchar(200))`).Error; err != nil {
		return fmt.Errorf("mark the schema as the example's: %w", err)
	}
	return db.Exec(`INSERT INTO `+ownerTable+` (note) VALUES (?)`,
		"made by Herald's examples/orders, which drops and recreates this schema on each run").Error
}

// reserved reports a schema or database no example may drop, whatever it
// holds (a mark left in it by mistake included): PostgreSQL's public and
// system schemas, MySQL's system databases.
func reserved(schema string) bool {
	switch strings.ToLower(schema) {
	case "public", "information_schema", "mysql", "performance_schema", "sys":
		return true
	}
	return strings.HasPrefix(strings.ToLower(schema), "pg_")
}
