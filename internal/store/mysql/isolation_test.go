package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// The relay's locking transactions run at READ COMMITTED on a connection
// whose session defaults to REPEATABLE READ (the server's default), and the
// level holds for that transaction alone: go-sql-driver sets it before BEGIN,
// and the next transaction on the same connection is back at the default.
// The level shows in what a transaction sees: at READ COMMITTED a second read
// sees a row another session committed after the first; at REPEATABLE READ it
// does not.
func TestLockingTxIsolation(t *testing.T) {
	t.Parallel()
	sqlDB, err := sql.Open("mysql", mysqltest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	ctx := context.Background()
	if _, err := sqlDB.ExecContext(ctx, `CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx) // one session for every transaction below
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	key := 0
	seesNewCommits := func(opts *sql.TxOptions) bool {
		t.Helper()
		var before, after int
		err := sqlkit.InTx(ctx, conn, opts, func(tx store.Execer) error {
			if err := sqlkit.QueryRow(ctx, tx, `SELECT COUNT(*) FROM t`, nil, &before); err != nil {
				return err
			}
			key++
			if _, err := sqlDB.ExecContext(ctx, `INSERT INTO t (k) VALUES (?)`, key); err != nil { // another session
				return err
			}
			return sqlkit.QueryRow(ctx, tx, `SELECT COUNT(*) FROM t`, nil, &after)
		})
		if err != nil {
			t.Fatal(err)
		}
		return after > before
	}
	if seesNewCommits(nil) {
		t.Skip("the server's default isolation is not REPEATABLE READ")
	}
	if !seesNewCommits(mysql.Driver{}.LockingTx()) {
		t.Fatal("a locking transaction does not run at READ COMMITTED")
	}
	if seesNewCommits(nil) {
		t.Fatal("the next transaction on the connection runs at READ COMMITTED: the level outlived its transaction")
	}
}
