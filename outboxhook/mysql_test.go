package outboxhook_test

// MySQL-specific tests of the plugin (they lived with the MySQL driver, whose
// tests now import nothing above the store).

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

type myAccount struct {
	ID    uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Owner string
	aggregate.Root
}

type myOpened struct{ Owner string }

func (myOpened) EventType() string { return "account.opened" }

// An upsert that does nothing on conflict (ON DUPLICATE KEY UPDATE pk = pk)
// is refused when it carries events, with clientFoundRows on (the count is 1
// for a row left alone as for an insert: the events of a row never written
// would be published) and off (a handle whose DSN the plugin cannot read, a
// *sql.DB given to the dialector): nothing is written, the events stay
// pending. UpdateAll writes the row and its events either way.
func TestUpsertDoNothingRefused(t *testing.T) {
	t.Parallel()
	for _, found := range []bool{true, false} {
		t.Run(map[bool]string{true: "clientFoundRows", false: "noClientFoundRows"}[found], func(t *testing.T) {
			t.Parallel()
			dsn := mysqltest.Database(t)
			if !found {
				dsn = strings.Replace(dsn, "clientFoundRows=true", "clientFoundRows=false", 1)
			}
			db := testkit.OpenMySQLOnConn(t, dsn)
			if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
				t.Fatal(err)
			}
			if err := db.AutoMigrate(&myAccount{}); err != nil {
				t.Fatal(err)
			}
			a := &myAccount{ID: uuid.New(), Owner: "a"}
			a.Record(myOpened{Owner: "a"})
			if err := db.Create(a).Error; err != nil {
				t.Fatal(err)
			}
			outbox := func() int64 {
				t.Helper()
				var n int64
				if err := db.Session(&gorm.Session{NewDB: true}).Table("outbox_messages").Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			dup := &myAccount{ID: a.ID, Owner: "dup"}
			dup.Record(myOpened{Owner: "dup"})
			if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(dup).Error; !errors.Is(err, outboxhook.ErrAmbiguousUpsert) {
				t.Fatalf("DO NOTHING on an existing row = %v, want ErrAmbiguousUpsert", err)
			}
			if n := outbox(); n != 1 {
				t.Fatalf("outbox has %d rows after DO NOTHING, want 1", n)
			}
			if n := len(dup.Records()); n != 1 {
				t.Fatalf("%d pending events after the refused upsert, want 1", n)
			}
			fresh := &myAccount{ID: uuid.New(), Owner: "fresh"}
			fresh.Record(myOpened{Owner: "fresh"})
			if err := db.Clauses(clause.OnConflict{}).Create(fresh).Error; !errors.Is(err, outboxhook.ErrAmbiguousUpsert) {
				t.Fatalf("an ON CONFLICT without updates = %v, want ErrAmbiguousUpsert", err)
			}
			var rows int64
			if err := db.Model(&myAccount{}).Count(&rows).Error; err != nil || rows != 1 {
				t.Fatalf("%d accounts (%v): the refused upsert wrote its row", rows, err)
			}
			up := &myAccount{ID: a.ID, Owner: "up"}
			up.Record(myOpened{Owner: "up"})
			if err := db.Clauses(clause.OnConflict{UpdateAll: true}).Create(up).Error; err != nil {
				t.Fatal(err)
			}
			if n := outbox(); n != 2 || len(up.Records()) != 0 {
				t.Fatalf("outbox has %d rows after UpdateAll (want 2), %d pending", n, len(up.Records()))
			}
		})
	}
}

// A MySQL DSN without clientFoundRows=true fails at db.Use: with it off, a Save
// that changes no column reports 0 rows, and its events would never be written.
func TestClientFoundRowsRequired(t *testing.T) {
	t.Parallel()
	dsn := strings.Replace(mysqltest.Database(t), "clientFoundRows=true", "clientFoundRows=false", 1)
	db, err := gorm.Open(gormmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{})); !errors.Is(err, drivers.ErrClientFoundRows) {
		t.Fatalf("db.Use = %v, want ErrClientFoundRows", err)
	}
}
