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
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
)

// urlHelp says which DATABASE_URLs the command reads.
const urlHelp = "postgres://user:pw@host:5432/db, mysql://user:pw@host:3306/db, sqlite:///path/to/file.db or file:path/to/file.db"

// target is a database a DATABASE_URL names.
type target struct {
	dialect string // "postgres", "sqlite", "mysql"
	dsn     string // what the driver opens
	where   string // for messages: host:port, or the SQLite file (no password)
	file    string // the SQLite file
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
		return target{dialect: "postgres", dsn: raw, where: u.Host}, nil
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
		return target{dialect: "mysql", dsn: user + "@tcp(" + host + ")/" + db + "?" + q.Encode(), where: host}, nil
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
		return target{dialect: "sqlite", dsn: "file:" + path + "?" + q.Encode(), where: path, file: path}, nil
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
	if t.dialect == "sqlite" && mustExist {
		if _, err := os.Stat(t.file); err != nil {
			return nil, fmt.Errorf("no SQLite database at %s", t.file)
		}
	}
	var d gorm.Dialector
	switch t.dialect {
	case "postgres":
		d = postgres.Open(t.dsn)
	case "mysql":
		d = mysql.Open(t.dsn)
	default:
		d = sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: t.dsn})
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
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
