package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/dberr"
	"github.com/heraldgo/herald/internal/drivers"
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
)

// urlHelp says which DATABASE_URLs the command reads.
const urlHelp = "postgres://user:pw@host:5432/db, mysql://user:pw@host:3306/db, sqlite:///path/to/file.db or file:path/to/file.db"

// target is a database a DATABASE_URL names.
type target struct {
	dialect   string                // its dialector's name: "postgres", "sqlite", "mysql"
	dialector func() gorm.Dialector // GORM's dialector on dsn, a new one each time
	dsn       string                // what the driver opens
	where     string                // for messages: host:port, or the SQLite file (no password)
	file      string                // the SQLite file; "" for a server
}

// newTarget is the target opened by dialector.
func newTarget(dialector func() gorm.Dialector, dsn, where, file string) target {
	return target{dialect: dialector().Name(), dialector: dialector, dsn: dsn, where: where, file: file}
}

// wal reports whether t's database can keep the outbox in its log, which
// the WAL relay streams (its driver's WAL capability).
func (t target) wal() bool {
	d, err := drivers.ForDialector(t.dialector())
	return err == nil && d.WAL() != nil
}

// parseURL reads a DATABASE_URL: postgres:// (or postgresql://) as it is;
// mysql://user:pw@host:port/db as go-sql-driver's user:pw@tcp(host:port)/db
// with clientFoundRows=true (Herald needs an UPDATE to report the rows it
// matched), parseTime and UTC; sqlite:///path or file:path as an SQLite file
// with the settings Herald needs, where the URL does not set them
// (relay.ErrSQLiteSettings): write transactions that take the write lock at
// BEGIN (_txlock=immediate), a 10 s busy timeout, WAL.
func parseURL(raw string) (target, error) {
	if raw == "" {
		return target{}, errors.New("DATABASE_URL is not set (" + urlHelp + ")")
	}
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return target{}, errors.New("DATABASE_URL has no scheme (" + urlHelp + ")")
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "postgres", "postgresql":
		u, err := url.Parse(raw)
		if err != nil {
			return target{}, fmt.Errorf("DATABASE_URL is not a URL: %w", unquoteURLError(err))
		}
		return newTarget(func() gorm.Dialector { return postgres.Open(raw) }, raw, u.Host, ""), nil
	case "mysql":
		u, err := url.Parse(raw)
		if err != nil {
			return target{}, fmt.Errorf("DATABASE_URL is not a URL: %w", unquoteURLError(err))
		}
		db := strings.TrimPrefix(u.Path, "/")
		if db == "" || strings.Contains(db, "/") {
			return target{}, fmt.Errorf("DATABASE_URL %s names no database (mysql://user:pw@host:3306/db)", u.Redacted())
		}
		host := u.Host
		if host == "" {
			host = "127.0.0.1"
		}
		if u.Port() == "" {
			host += ":3306"
		}
		q := u.Query()
		q.Set("clientFoundRows", "true")
		q.Set("parseTime", "true")
		q.Set("loc", "UTC")
		user := ""
		if u.User != nil {
			user = u.User.Username()
			if pw, ok := u.User.Password(); ok {
				user += ":" + pw
			}
		}
		dsn := user + "@tcp(" + host + ")/" + db + "?" + q.Encode()
		return newTarget(func() gorm.Dialector { return mysql.Open(dsn) }, dsn, host, ""), nil
	case "sqlite", "file":
		path, query, _ := strings.Cut(rest, "?")
		if scheme == "sqlite" {
			// sqlite:///abs/path, sqlite://rel/path
			path = strings.TrimPrefix(path, "//")
		} else if strings.HasPrefix(path, "///") {
			path = path[2:] // file:///abs/path
		}
		if path == "" {
			return target{}, errors.New("DATABASE_URL names no SQLite file (sqlite:///path/to/file.db)")
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return target{}, fmt.Errorf("DATABASE_URL: bad query: %w", err)
		}
		if !q.Has("_txlock") {
			q.Set("_txlock", "immediate")
		}
		if !strings.Contains(query, "busy_timeout") {
			q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqlitestore.BusyTimeout))
		}
		if !strings.Contains(query, "journal_mode") {
			q.Add("_pragma", "journal_mode(WAL)")
		}
		dsn := "file:" + path + "?" + q.Encode()
		return newTarget(func() gorm.Dialector { return sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}) }, dsn, path, path), nil
	}
	return target{}, fmt.Errorf("DATABASE_URL: unknown scheme %q (%s)", scheme, urlHelp)
}

// unquoteURLError drops the URL, which may hold a password, from a
// url.Parse error.
func unquoteURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// open opens GORM on t and checks that the database answers. With
// mustExist, an SQLite file that does not exist is an error (opening would
// create it).
func open(ctx context.Context, t target, mustExist bool) (*gorm.DB, error) {
	if t.file != "" && mustExist {
		if _, err := os.Stat(t.file); err != nil {
			return nil, fmt.Errorf("no SQLite database at %s", t.file)
		}
	}
	db, err := gorm.Open(t.dialector(), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("open %s at %s: %s", t.dialect, t.where, dberr.RootCause(err))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("cannot reach %s at %s: %s", t.dialect, t.where, dberr.RootCause(err))
	}
	return db, nil
}

func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}

// oneLine joins a message's lines.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
