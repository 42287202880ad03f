package e2e

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// WelcomeArgs is the River job the test inserts next to an account's event.
type WelcomeArgs struct {
	AccountID string `json:"account_id"`
}

// Kind names the job.
func (WelcomeArgs) Kind() string { return "welcome" }

var errRiverRollback = errors.New("the caller gives up")

// River shares Herald's transaction: in one db.Transaction, an aggregate saved
// through GORM (its row, its event in the outbox) and a River job inserted
// with InsertTx on the *sql.Tx outboxhook.SQLTx returns commit together, or
// roll back together when the function returns an error. River's tables live
// in the test's own schema (its DSN's search_path), dropped when it ends. The
// committing transaction is the README's code (region "river").
func TestRiverInsertTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, dsn := pgtest.Schema(t)
	db := testkit.Postgres.Open(t, dsn, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	testkit.Must(t, db.AutoMigrate(&Account{}))

	sqlDB, err := db.DB()
	testkit.Must(t, err)
	driver := riverdatabasesql.New(sqlDB)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quietLogger()})
	testkit.Must(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	testkit.Must(t, err)
	var tables int64
	testkit.Must(t, db.Raw(`SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'river_job'`, schema).Scan(&tables).Error)
	if tables != 1 {
		t.Fatalf("river_job is not in the test's schema %s", schema)
	}
	// Insert-only: no queues, no workers.
	riverClient, err := river.NewClient(driver, &river.Config{Logger: quietLogger()})
	testkit.Must(t, err)

	// check checks that account's row, its event and its job were all
	// written (want 1) or none (want 0), and that the aggregate forgot its
	// event exactly when it was written.
	check := func(what string, account *Account, want int64) {
		t.Helper()
		var accounts, events, jobs int64
		testkit.Must(t, db.Model(&Account{}).Where("id = ?", account.ID).Count(&accounts).Error)
		testkit.Must(t, db.Raw(`SELECT count(*) FROM outbox_messages WHERE aggregate_id = ?`, account.ID.String()).Scan(&events).Error)
		testkit.Must(t, db.Raw(`SELECT count(*) FROM river_job WHERE kind = 'welcome' AND args->>'account_id' = ?`, account.ID.String()).Scan(&jobs).Error)
		if accounts != want || events != want || jobs != want {
			t.Fatalf("%s: %d accounts, %d outbox rows and %d river jobs, want %d of each", what, accounts, events, jobs, want)
		}
		if pending := int64(len(account.Events())); pending != 1-want {
			t.Fatalf("%s: %d events pending on the aggregate, want %d", what, pending, 1-want)
		}
	}

	account := &Account{ID: uuid.New()}
	account.Record(Deposited{AccountID: account.ID, Seq: 1})
	// README:river
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(account).Error; err != nil { // the account and its event
			return err
		}
		sqlTx, ok := outboxhook.SQLTx(tx) // tx.Statement.ConnPool.(*sql.Tx) is false with the plugin
		if !ok {
			return errors.New("not in a transaction")
		}
		_, err := riverClient.InsertTx(ctx, sqlTx, WelcomeArgs{AccountID: account.ID.String()}, nil)
		return err // the account, its event and the job commit together, or none does
	})
	// README:end
	testkit.Must(t, err)
	check("commit", account, 1)

	account = &Account{ID: uuid.New()}
	account.Record(Deposited{AccountID: account.ID, Seq: 1})
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(account).Error; err != nil {
			return err
		}
		sqlTx, ok := outboxhook.SQLTx(tx)
		if !ok {
			return errors.New("not in a transaction")
		}
		if _, err := riverClient.InsertTx(ctx, sqlTx, WelcomeArgs{AccountID: account.ID.String()}, nil); err != nil {
			return err
		}
		return errRiverRollback
	})
	if !errors.Is(err, errRiverRollback) {
		t.Fatalf("rollback: db.Transaction = %v, want %v", err, errRiverRollback)
	}
	check("rollback", account, 0)
}
