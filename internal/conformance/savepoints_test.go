package conformance

// Raw savepoint statements, in every spelling a database accepts, with and
// without PrepareStmt: a ROLLBACK TO that undid an outbox row never loses the
// event (it stays pending on its aggregate, and the next save writes it).

import (
	"fmt"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// spelling is a raw SAVEPOINT and the ROLLBACK TO that undoes it, and the
// databases that accept the pair.
type spelling struct {
	name, set, rollback string
	dbs                 []string // nil: all
	setup               string   // run once before (MySQL: a procedure)
}

var spellings = []spelling{
	{name: "canonical", set: "SAVEPOINT sp", rollback: "ROLLBACK TO SAVEPOINT sp"},
	{name: "short", set: "SAVEPOINT sp", rollback: "ROLLBACK TO sp"},
	{name: "lower case, semicolons", set: "savepoint sp;", rollback: "rollback to savepoint sp;"},
	{name: "leading white space", set: "\n\t  SAVEPOINT sp", rollback: "\n\t  ROLLBACK TO SAVEPOINT sp\n"},
	{name: "name in another case", set: "SAVEPOINT Before_Pay", rollback: "ROLLBACK TO before_pay"},
	{name: "unquoted and quoted name", set: "SAVEPOINT Before_Pay", rollback: `ROLLBACK TO "before_pay"`, dbs: []string{"postgres"}},
	{name: "quoted names", set: `SAVEPOINT "sp"`, rollback: `ROLLBACK TO SAVEPOINT "sp"`, dbs: []string{"postgres", "sqlite"}},
	{name: "backquoted names", set: "SAVEPOINT `sp`", rollback: "ROLLBACK TO `sp`", dbs: []string{"mysql", "sqlite"}},
	{name: "ROLLBACK TRANSACTION TO", set: "SAVEPOINT sp", rollback: "ROLLBACK TRANSACTION TO SAVEPOINT sp", dbs: []string{"postgres", "sqlite"}},
	{name: "ROLLBACK WORK TO", set: "SAVEPOINT sp", rollback: "ROLLBACK WORK TO sp", dbs: []string{"postgres", "mysql"}},
	{name: "leading comments", set: "/* a */ SAVEPOINT sp", rollback: "-- undo\n/* b */ ROLLBACK TO sp"},
	{name: "unicode escape name", set: "SAVEPOINT sp", rollback: `ROLLBACK TO U&"sp"`, dbs: []string{"postgres"}},
	{name: "nested comments", set: "/* a */ SAVEPOINT sp", rollback: "/* the /* nested */ one */ ROLLBACK TO sp", dbs: []string{"postgres"}},
	{name: "hash comment", set: "SAVEPOINT sp", rollback: "# undo\nROLLBACK TO sp", dbs: []string{"mysql"}},
	{name: "executable comment", set: "SAVEPOINT sp", rollback: "/*!ROLLBACK TO sp*/", dbs: []string{"mysql"}},
	{name: "trailing comment", set: "SAVEPOINT sp -- set", rollback: "ROLLBACK TO sp /* undo */", dbs: []string{"postgres", "sqlite", "mysql"}},
	{name: "set unseen, by a comment spelling", set: "/*+ hint */SAVEPOINT sp", rollback: "ROLLBACK TO SAVEPOINT sp"},
	{name: "procedure", set: "SAVEPOINT sp", rollback: "CALL herald_undo_sp()", dbs: []string{"mysql"},
		setup: "CREATE PROCEDURE herald_undo_sp() BEGIN ROLLBACK TO SAVEPOINT sp; END"},
}

func testRawSavepointSpellings(t *testing.T, dl testkit.Dialect) {
	for _, prepare := range []bool{false, true} {
		db := setup(t, dl, outboxhook.Config{}, &gorm.Config{PrepareStmt: prepare})
		for _, s := range spellings {
			if s.dbs != nil && !slices.Contains(s.dbs, dl.Name) {
				continue
			}
			t.Run(fmt.Sprintf("%s/PrepareStmt=%v", s.name, prepare), func(t *testing.T) {
				if s.setup != "" {
					must(t, db.Exec("DROP PROCEDURE IF EXISTS herald_undo_sp").Error)
					must(t, db.Exec(s.setup).Error)
				}
				before := count(t, db, "outbox_messages")
				kept, o := NewOrder(), NewOrder()
				must(t, db.Transaction(func(tx *gorm.DB) error {
					must(t, tx.Create(kept).Error) // before the savepoint: kept
					must(t, tx.Exec(s.set).Error)
					must(t, tx.Create(o).Error)
					return tx.Exec(s.rollback).Error
				}))
				if n := count(t, db, "outbox_messages"); n != before+1 {
					t.Fatalf("%d outbox rows written, want 1 (the one before the savepoint)", n-before)
				}
				wantNoPending(t, kept)
				// The rolled-back event is still the aggregate's: saving it again writes it.
				wantPending(t, o, 1)
				must(t, db.Create(o).Error)
				wantNoPending(t, o)
				if n := count(t, db, "outbox_messages"); n != before+2 {
					t.Fatalf("after saving again: %d outbox rows written, want 2", n-before)
				}
			})
		}
	}
}
