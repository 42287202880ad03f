package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store/mysql"
)

// CheckConn refuses a DSN whose loc is not UTC all year, with parseTime or
// without (the driver writes time arguments as wall times of its loc either
// way), and accepts loc=UTC and the zones with no offset.
func TestCheckConnLoc(t *testing.T) {
	t.Parallel()
	dsn := mysqltest.Database(t)
	for _, c := range []struct {
		loc, parseTime string
		refused        bool
	}{
		{"UTC", "true", false},
		{"UTC", "false", false},
		{"GMT", "true", false},
		{"America/New_York", "true", true},
		{"America/New_York", "false", true},
		{"Asia/Kolkata", "true", true},
		{"Europe/London", "true", true}, // UTC in winter only
	} {
		t.Run(c.loc+"/parseTime="+c.parseTime, func(t *testing.T) {
			d := strings.Replace(dsn, "loc=UTC", "loc="+url.QueryEscape(c.loc), 1)
			d = strings.Replace(d, "parseTime=true", "parseTime="+c.parseTime, 1)
			db, err := sql.Open("mysql", d)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			err = mysql.Driver{}.CheckConn(context.Background(), db)
			switch {
			case c.refused && !errors.Is(err, mysql.ErrLoc):
				t.Fatalf("CheckConn = %v, want ErrLoc", err)
			case !c.refused && err != nil:
				t.Fatalf("CheckConn = %v, want nil", err)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// CheckLoc, for a parsed DSN's loc, refuses a zone with an offset at some
// time of the year.
func TestCheckLoc(t *testing.T) {
	t.Parallel()
	for name, refused := range map[string]bool{
		"UTC": false, "GMT": false, "Etc/UTC": false,
		"America/New_York": true, "Asia/Kolkata": true, "Europe/London": true, "Australia/Sydney": true,
	} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		err = mysql.CheckLoc(loc)
		if refused != errors.Is(err, mysql.ErrLoc) || (!refused && err != nil) {
			t.Errorf("CheckLoc(%s) = %v, want refused %v", name, err, refused)
		}
	}
	if err := mysql.CheckLoc(time.FixedZone("x", 3600)); !errors.Is(err, mysql.ErrLoc) {
		t.Errorf("CheckLoc(UTC+1) = %v, want ErrLoc", err)
	}
}
