package outboxhook

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func TestParseStatement(t *testing.T) {
	for _, c := range []struct {
		q     string
		op    spOp
		name  string
		doubt bool
	}{
		{"SAVEPOINT sp", spSet, "sp", false},
		{"savepoint Before_Pay;", spSet, "before_pay", false},
		{`SAVEPOINT "Before_Pay"`, spSet, "Before_Pay", false},
		{"SAVEPOINT `a``b`", spSet, "a`b", false},
		{"  \n\tSAVEPOINT sp -- note", spSet, "sp", false},
		{"/* a /* nested */ b */ SAVEPOINT sp", spSet, "sp", false},
		{"ROLLBACK TO SAVEPOINT sp", spRollback, "sp", false},
		{"ROLLBACK TO sp", spRollback, "sp", false},
		{"rollback work to savepoint SP ;", spRollback, "sp", false},
		{"ROLLBACK TRANSACTION TO sp", spRollback, "sp", false},
		{"ROLLBACK TO savepoint", spRollback, "savepoint", false},
		{"ROLLBACK TO SAVEPOINT savepoint", spRollback, "savepoint", false},
		{"RELEASE sp", spRelease, "sp", false},
		{"RELEASE SAVEPOINT sp", spRelease, "sp", false},
		{"RELEASE savepoint", spRelease, "savepoint", false},
		// What it does not read exactly, and may roll back: doubt.
		{"ROLLBACK", spNone, "", true},
		{"ROLLBACK TO a; ROLLBACK TO b", spNone, "", true},
		{"/*!ROLLBACK TO sp*/", spNone, "", true},
		{"# c\nROLLBACK TO sp", spNone, "", true},
		{"ROLLBACK TO U&\"sp\"", spNone, "", true},
		{"ROLLBACK TO 'sp'", spNone, "", true},
		{"ROLLBACK TO [sp]", spNone, "", true},
		{"CALL undo()", spNone, "", true},
		{"EXECUTE s", spNone, "", true},
		{"SELECT 1; ROLLBACK", spNone, "", true},
		// Ordinary statements.
		{"INSERT INTO orders (id) VALUES (1)", spNone, "", false},
		{"UPDATE callbacks SET recall = 1", spNone, "", false},
		{"SAVEPOINT", spNone, "", false},
		{"", spNone, "", false},
	} {
		s := parseStatement(c.q)
		if s.op != c.op || s.name != c.name || s.mayRollBack != c.doubt {
			t.Errorf("parseStatement(%q) = %+v, want op %d name %q doubt %v", c.q, s, c.op, c.name, c.doubt)
		}
	}
}

// FuzzParseStatement runs each input as a statement in an SQLite transaction
// holding two savepoints, after a row was written under the second: if the
// row is gone, the recogniser must have read a ROLLBACK TO one of them, or
// put the transaction in doubt. A row the recogniser says was rolled back
// must be gone. It never panics, and whatever mentions ROLLBACK is read as
// one or doubted.
func FuzzParseStatement(f *testing.F) {
	for _, q := range []string{
		"ROLLBACK TO a", "rollback to savepoint B", " \n ROLLBACK TRANSACTION TO a", "/* x */ ROLLBACK TO b",
		"-- x\nROLLBACK TO SAVEPOINT a;", `ROLLBACK TO "b"`, "ROLLBACK TO `a`", "ROLLBACK", "RELEASE a", "SAVEPOINT c",
		"ROLLBACK TO [b]", "ROLLBACK TO 'a'", "SELECT 1", "ROLLBACK TO a; SELECT 1", "END", "COMMIT",
	} {
		f.Add(q)
	}
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		f.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	f.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER)`); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		s := parseStatement(q)
		if containsFold(q, "rollback") && s.op != spRollback && !s.mayRollBack {
			t.Fatalf("%q mentions ROLLBACK, read as %+v", q, s)
		}
		if s.op == spRollback && !containsFold(q, "rollback") {
			t.Fatalf("%q read as a ROLLBACK TO", q)
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_, _ = conn.ExecContext(ctx, `ROLLBACK`) // whatever an earlier input left open
		_, _ = conn.ExecContext(ctx, `DELETE FROM t`)
		for _, st := range []string{`BEGIN`, `SAVEPOINT a`, `SAVEPOINT b`, `INSERT INTO t VALUES (1)`} {
			if _, err := conn.ExecContext(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return // refused: the transaction is judged on errors by txn.ran
		}
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			return // the statement ended the transaction and more: nothing to judge
		}
		readAsUndo := s.op == spRollback && (s.name == "a" || s.name == "b")
		if n == 0 && !readAsUndo && !s.mayRollBack {
			t.Fatalf("%q undid the row, read as %+v", q, s)
		}
		if n == 1 && readAsUndo && !strings.Contains(strings.ToLower(q), "release") {
			t.Fatalf("%q read as %+v, but the row is still there", q, s)
		}
	})
}
