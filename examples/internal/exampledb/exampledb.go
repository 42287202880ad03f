// Package exampledb opens the examples' database: an SQLite file in a
// temporary directory when nothing is configured, or the PostgreSQL or MySQL
// server a URL names, in a schema or database of the example's own.
package exampledb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/dberr"
)

// Open opens GORM on the database dbURL names, or on an SQLite file in
// a temporary directory when it is empty, in a schema (PostgreSQL) or database
// (MySQL) of its own. It says in one line why a server could not be reached.
func Open(ctx context.Context, dbURL, schema string) (db *gorm.DB, where string, closeDB func(), err error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	switch {
	case dbURL == "":
		dir, err := os.MkdirTemp("", "herald-example-")
		if err != nil {
			return nil, "", nil, err
		}
		path := filepath.Join(dir, "app.db")
		// WAL: readers do not block the writer; _txlock=immediate: a write
		// transaction takes SQLite's one write lock when it begins, and waits
		// for it up to the busy timeout, instead of failing later.
		dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), cfg)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, "", nil, err
		}
		return db, "SQLite " + path, func() { closeGORM(db); _ = os.RemoveAll(dir) }, nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		db, err := openPostgres(ctx, dbURL, schema, cfg)
		if err != nil {
			return nil, "", nil, err
		}
		return db, "PostgreSQL, schema " + schema, func() { closeGORM(db) }, nil
	case strings.HasPrefix(dbURL, "mysql://"):
		db, err := openMySQL(ctx, dbURL, schema, cfg)
		if err != nil {
			return nil, "", nil, err
		}
		return db, "MySQL, database " + schema, func() { closeGORM(db) }, nil
	}
	return nil, "", nil, fmt.Errorf("DATABASE_URL %q: want postgres://..., mysql://... or nothing (SQLite)", dbURL)
}

func closeGORM(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}

// openPostgres recreates schema and opens GORM in it.
func openPostgres(ctx context.Context, dbURL, schema string, cfg *gorm.Config) (*gorm.DB, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a URL: %w", err)
	}
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s (unset DATABASE_URL to run on SQLite)", u.Host, dberr.RootCause(err))
	}
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := gorm.Open(postgres.Open(u.String()), cfg)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxIdleConns(16) // database/sql keeps 2 by default: every extra statement would reconnect
	return db, nil
}

// openMySQL recreates database name and opens GORM in it. mysql://user:pw@host:port/db
// becomes go-sql-driver's user:pw@tcp(host:port)/name, with clientFoundRows=true
// (Herald needs an UPDATE to report the rows it matched), parseTime and UTC.
func openMySQL(ctx context.Context, dbURL, name string, cfg *gorm.Config) (*gorm.DB, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a URL: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	dsn := func(db string) string {
		q := u.Query()
		q.Set("clientFoundRows", "true")
		q.Set("parseTime", "true")
		q.Set("loc", "UTC")
		return u.User.String() + "@tcp(" + host + ")/" + db + "?" + q.Encode()
	}
	admin, err := sql.Open("mysql", dsn(""))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("cannot reach MySQL at %s: %s (unset DATABASE_URL to run on SQLite)", host, dberr.RootCause(err))
	}
	for _, q := range []string{"DROP DATABASE IF EXISTS `" + name + "`", "CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return gorm.Open(mysql.Open(dsn(name)), cfg)
}
