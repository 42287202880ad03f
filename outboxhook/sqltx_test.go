package outboxhook_test

// SQLTx: the *sql.Tx under the plugin's wrapper is the GORM transaction's own,
// on every database, with and without PrepareStmt, with and without the
// plugin: a row written through it commits and rolls back with the GORM
// transaction, savepoints of a nested db.Transaction included.

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// sqlTxNote is a row the tests write through the *sql.Tx, not through GORM.
type sqlTxNote struct {
	ID   uint
	Body string
}

var errSQLTxBoom = errors.New("boom")

// sqlTxRun is one transaction of TestSQLTx: what it wrote, under which label.
type sqlTxRun struct {
	t        *testing.T
	d        testkit.Dialect
	db       *gorm.DB // outside the transaction
	plain    bool     // tx.Statement.ConnPool.(*sql.Tx) is expected to hold
	sqlTx    *sql.Tx  // the outer transaction's
	prefix   string   // of the notes' bodies: the case's name, the database is shared
	accounts map[string]*testkit.Account
}

// write saves a new account, with an event, through GORM, and a note labelled
// label through the transaction's *sql.Tx, and checks the note is in tx's
// transaction: seen through GORM inside it, not from outside.
func (r *sqlTxRun) write(tx *gorm.DB, label string) error {
	t := r.t
	t.Helper()
	if _, plain := tx.Statement.ConnPool.(*sql.Tx); plain != r.plain {
		t.Fatalf("tx.Statement.ConnPool.(*sql.Tx) = %v, want %v", plain, r.plain)
	}
	sqlTx, ok := outboxhook.SQLTx(tx)
	if !ok || sqlTx == nil {
		t.Fatalf("SQLTx in a transaction = %v, %v", sqlTx, ok)
	}
	if r.sqlTx == nil {
		r.sqlTx = sqlTx
	} else if sqlTx != r.sqlTx {
		t.Fatal("a nested transaction's *sql.Tx is not the outer one's")
	}
	a := &testkit.Account{ID: uuid.New()}
	a.Record(testkit.Deposited{AccountID: a.ID, Seq: 1})
	if err := tx.Create(a).Error; err != nil {
		return err
	}
	r.accounts[label] = a
	insert := `INSERT INTO sql_tx_notes (body) VALUES (?)`
	if r.d.Name == "postgres" {
		insert = `INSERT INTO sql_tx_notes (body) VALUES ($1)`
	}
	if _, err := sqlTx.ExecContext(context.Background(), insert, r.prefix+label); err != nil {
		return err
	}
	if n := r.notes(tx, label); n != 1 {
		t.Fatalf("note %q seen %d times through GORM in its transaction, want 1", label, n)
	}
	if n := r.notes(r.db, label); n != 0 {
		t.Fatalf("note %q seen outside its transaction before it committed", label)
	}
	return nil
}

func (r *sqlTxRun) notes(db *gorm.DB, label string) int64 {
	r.t.Helper()
	var n int64
	must(r.t, db.Session(&gorm.Session{NewDB: true}).Model(&sqlTxNote{}).Where("body = ?", r.prefix+label).Count(&n).Error)
	return n
}

func TestSQLTx(t *testing.T) {
	cases := []struct {
		name string
		fn   func(r *sqlTxRun, tx *gorm.DB) error
		err  error    // what db.Transaction returns
		kept []string // the labels whose writes committed; the others rolled back
		all  []string
	}{
		{
			name: "commit",
			fn:   func(r *sqlTxRun, tx *gorm.DB) error { return r.write(tx, "a") },
			kept: []string{"a"}, all: []string{"a"},
		},
		{
			name: "rollback",
			fn: func(r *sqlTxRun, tx *gorm.DB) error {
				if err := r.write(tx, "a"); err != nil {
					return err
				}
				return errSQLTxBoom
			},
			err: errSQLTxBoom, all: []string{"a"},
		},
		{
			name: "nested commit",
			fn: func(r *sqlTxRun, tx *gorm.DB) error {
				if err := r.write(tx, "a"); err != nil {
					return err
				}
				return tx.Transaction(func(tx *gorm.DB) error { return r.write(tx, "b") })
			},
			kept: []string{"a", "b"}, all: []string{"a", "b"},
		},
		{
			name: "nested rollback to the savepoint",
			fn: func(r *sqlTxRun, tx *gorm.DB) error {
				if err := r.write(tx, "a"); err != nil {
					return err
				}
				err := tx.Transaction(func(tx *gorm.DB) error {
					if err := r.write(tx, "b"); err != nil {
						return err
					}
					return errSQLTxBoom
				})
				if !errors.Is(err, errSQLTxBoom) {
					r.t.Fatalf("nested transaction = %v, want %v", err, errSQLTxBoom)
				}
				return r.write(tx, "c")
			},
			kept: []string{"a", "c"}, all: []string{"a", "b", "c"},
		},
		{
			name: "nested commit, outer rollback",
			fn: func(r *sqlTxRun, tx *gorm.DB) error {
				if err := r.write(tx, "a"); err != nil {
					return err
				}
				if err := tx.Transaction(func(tx *gorm.DB) error { return r.write(tx, "b") }); err != nil {
					return err
				}
				return errSQLTxBoom
			},
			err: errSQLTxBoom, all: []string{"a", "b"},
		},
	}
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for _, prepare := range []bool{false, true} {
			for _, plugin := range []bool{true, false} {
				name := map[bool]string{true: "PrepareStmt", false: "noPrepareStmt"}[prepare] + "/" +
					map[bool]string{true: "plugin", false: "noPlugin"}[plugin]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					db := d.OpenNew(t, &gorm.Config{PrepareStmt: prepare})
					if plugin {
						must(t, db.Use(outboxhook.New(outboxhook.Config{})))
					}
					must(t, db.AutoMigrate(&testkit.Account{}, &sqlTxNote{}))

					// Outside a transaction there is none.
					if tx, ok := outboxhook.SQLTx(db); ok || tx != nil {
						t.Fatalf("SQLTx(db) = %v, %v", tx, ok)
					}
					if tx, ok := outboxhook.SQLTx(db.Session(&gorm.Session{})); ok || tx != nil {
						t.Fatalf("SQLTx(session) = %v, %v", tx, ok)
					}
					if tx, ok := outboxhook.SQLTx(nil); ok || tx != nil {
						t.Fatalf("SQLTx(nil) = %v, %v", tx, ok)
					}
					begun := db.Begin()
					must(t, begun.Error)
					if tx, ok := outboxhook.SQLTx(begun); !ok || tx == nil {
						t.Fatalf("SQLTx(db.Begin()) = %v, %v", tx, ok)
					}
					must(t, begun.Rollback().Error)

					for _, c := range cases {
						r := &sqlTxRun{t: t, d: d, db: db, plain: !plugin && !prepare, prefix: c.name + ":", accounts: map[string]*testkit.Account{}}
						if err := db.Transaction(func(tx *gorm.DB) error { return c.fn(r, tx) }); !errors.Is(err, c.err) {
							t.Fatalf("%s: db.Transaction = %v, want %v", c.name, err, c.err)
						}
						outbox := map[string]int{}
						if plugin {
							for _, row := range testkit.Outbox(t, db) {
								outbox[row.AggregateID]++
							}
						}
						for _, label := range c.all {
							a := r.accounts[label]
							want := 0
							for _, k := range c.kept {
								if k == label {
									want = 1
								}
							}
							var accounts int64
							must(t, db.Model(&testkit.Account{}).Where("id = ?", a.ID).Count(&accounts).Error)
							if n := r.notes(db, label); n != int64(want) || accounts != int64(want) {
								t.Fatalf("%s: %s: note %d, account %d after the transaction, want %d", c.name, label, n, accounts, want)
							}
							if !plugin {
								continue
							}
							if outbox[a.ID.String()] != want {
								t.Fatalf("%s: %s: %d outbox rows, want %d", c.name, label, outbox[a.ID.String()], want)
							}
							if pending := len(a.Events()); pending != 1-want {
								t.Fatalf("%s: %s: %d events pending on the aggregate, want %d", c.name, label, pending, 1-want)
							}
						}
					}
				})
			}
		}
	})
}

// A savepoint set and rolled back to on the *sql.Tx directly is not seen, but
// the transaction that handed its *sql.Tx out looks its outbox rows up at
// commit: the event the ROLLBACK TO undid stays pending, as it does through
// GORM (tx.SavePoint, tx.RollbackTo).
func TestSQLTxSavepointRollbackKeepsEvents(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	ctx := context.Background()
	for _, direct := range []bool{true, false} {
		o := NewOrder()
		must(t, db.Transaction(func(tx *gorm.DB) error {
			sqlTx, ok := outboxhook.SQLTx(tx)
			if !ok {
				t.Fatal("no *sql.Tx")
			}
			if direct {
				if _, err := sqlTx.ExecContext(ctx, `SAVEPOINT direct`); err != nil {
					return err
				}
			} else if err := tx.SavePoint("direct").Error; err != nil {
				return err
			}
			if err := tx.Create(o).Error; err != nil {
				return err
			}
			if direct {
				_, err := sqlTx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT direct`)
				return err
			}
			return tx.RollbackTo("direct").Error
		}))
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Fatalf("direct=%v: %d outbox rows, want 0 (rolled back to the savepoint)", direct, n)
		}
		if got := len(o.Events()); got != 1 {
			t.Fatalf("direct=%v: %d events pending on the aggregate, want 1", direct, got)
		}
	}
}
