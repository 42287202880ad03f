package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are MySQL's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    BIGINT       NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES (?, ?)`
}

// exists reports whether the table, or the index, named n exists.
func exists(ctx context.Context, x store.Execer, n ident.Table, index bool, on ident.Table) (bool, error) {
	o := store.Object{Kind: store.KindTable, Name: n}
	if index {
		o = store.Object{Kind: store.KindIndex, Name: n, On: on}
	}
	return objectExists(ctx, x, o)
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

// objectExists looks o up alone (objectsExist), a step by its check.
var objectExists = migrate.One(objectsExist)

// ObjectsExist reports whether each of objs (tables, indexes and columns)
// exists, in one statement.
func (Driver) ObjectsExist(ctx context.Context, x store.Execer, objs []store.Object) ([]bool, error) {
	return objectsExist(ctx, x, objs)
}

// objectsExist reports whether each of objs (tables, indexes and columns)
// exists, in one statement: a column of the row for each.
var objectsExist = migrate.All(func(o store.Object, args []any) (string, []any) {
	schema := any(nil)
	if o.Name.Schema != "" {
		schema = string(o.Name.Schema)
	}
	switch o.Kind {
	case store.KindColumn:
		return `EXISTS (SELECT 1 FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?)`, append(args, schema, string(o.Name.Name), o.Column)
	case store.KindIndex:
		return `EXISTS (SELECT 1 FROM information_schema.statistics
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND index_name = ?)`, append(args, schema, string(o.On.Name), string(o.Name.Name))
	}
	return `EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?)`,
		append(args, schema, string(o.Name.Name))
})

// schema is what Herald creates and checks from the migrations (MySQL's
// CREATE INDEX has no IF NOT EXISTS: each object is looked up first). MySQL
// commits DDL statement by statement, so a creation is visible half-made:
// creations, checks and migrations take the database's schema lock
// (lockSchema).
var schema = migrate.Schema{FS: Migrations(), Quote: Quote, Exists: objectExists, ExistsAll: objectsExist, Lock: lockSchema}

var _ migrate.SchemaLocker = Driver{}

// SchemaLock takes the schema lock of the database of t (lockSchema): what
// migrate.Migrate holds throughout.
func (Driver) SchemaLock(ctx context.Context, x store.Execer, t ident.Table) (store.Execer, func(), error) {
	return lockSchema(ctx, x, t)
}

// SchemaLockWait is how long a creation, a check or a migration waits for
// another instance's to end before it fails (the relay tries again).
const SchemaLockWait = 60 * time.Second

// schemaLockName names the schema lock of a database: a server-wide named
// lock (GET_LOCK; at most 64 characters, hence the hash), one per database,
// for Herald's tables in it (the outboxes, their relays' tables, the inboxes
// and the migrations table).
const schemaLockName = `CONCAT('herald_schema_', SHA1(COALESCE(?, DATABASE(), '')))`

// lockSchema is the migrate.Locker of MySQL: the named lock of the database
// of t (its schema, else the connection's), taken with GET_LOCK on a
// connection of x's pool held until unlock, which releases it and gives the
// connection back (or, when the release fails, closes it: the server
// releases a session's locks when it ends). Only the creation or check runs
// under it, on that connection. On a single connection (a *sql.Conn or a
// *sql.Tx) the lock is taken on it; on an Execer that is neither a pool nor
// a single connection, no lock is taken.
func lockSchema(ctx context.Context, x store.Execer, t ident.Table) (store.Execer, func(), error) {
	var conn *sql.Conn
	on := x
	switch v := x.(type) {
	case *sql.Conn, *sql.Tx:
	case interface {
		Conn(context.Context) (*sql.Conn, error)
	}:
		c, err := v.Conn(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("take a connection for the schema lock: %w", err)
		}
		conn, on = c, c
	default:
		return x, func() {}, nil
	}
	db := any(nil)
	if t.Schema != "" {
		db = string(t.Schema)
	}
	var (
		name string
		got  sql.NullInt64
	)
	err := sqlkit.QueryRow(ctx, on, `SELECT n.name, GET_LOCK(n.name, ?) FROM (SELECT `+schemaLockName+` AS name) n`,
		[]any{int(SchemaLockWait / time.Second), db}, &name, &got)
	switch {
	case err != nil:
		err = fmt.Errorf("take the schema lock: %w", err)
	case !got.Valid:
		err = fmt.Errorf("take the schema lock %s: GET_LOCK returned NULL", name)
	case got.Int64 != 1:
		err = fmt.Errorf("take the schema lock %s: another instance has been creating or migrating Herald's tables for over %s", name, SchemaLockWait)
	}
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, nil, err
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, err := on.ExecContext(ctx, `DO RELEASE_LOCK(?)`, name)
		if conn == nil {
			return
		}
		if err != nil {
			// The lock may still be held: end the session, which releases
			// it, rather than give the connection back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}
	return on, unlock, nil
}
