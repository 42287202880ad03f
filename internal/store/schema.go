package store

import (
	"errors"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
)

// Kind is what a migration statement makes.
type Kind int

const (
	// KindTable is a CREATE TABLE.
	KindTable Kind = iota
	// KindIndex is a CREATE INDEX: it only makes things faster.
	KindIndex
	// KindColumn is an ALTER TABLE ... ADD COLUMN (one column a statement).
	KindColumn
	// KindStep is any other statement that does not follow one of the above
	// in its file (a data step: seed rows, say), or one with a check.
	KindStep
)

// Object is what one statement of a migration makes, so that it can be looked
// for before it is made (a role without DDL rights then works once it exists;
// migrate.Migrate then works over what Herald created itself), and looked for
// at start (migrate.CheckSchema). The migration engine, package migrate,
// reads the objects of the files; a Driver looks them up (ObjectExists).
type Object struct {
	File  string // the migration file, "0004_outbox_upgrade.up.sql"
	Kind  Kind
	SQL   string
	After []string // statements that fill what SQL made (seed rows, backfills), run right after it

	// Name is the table or index a CREATE makes, the table a column is added
	// to, or the table a step writes.
	Name ident.Table
	// On is an index's table.
	On ident.Table
	// Column is the column a KindColumn adds.
	Column string
	// Check, for a step, is a query that returns a row when the step's effect
	// is there already (then it is not run, and the schema is up to date); a
	// step without one always runs in migrate.Migrate and is never checked.
	Check string
	// Replaces says that an index's migration drops another index after
	// making it (After): a change to the table, which self-creation makes
	// only on a table it made in the same call.
	Replaces bool
	// Drops are the indexes the Replaces statements drop (each migration's
	// objects list them once; later objects lists leave them out), or, for
	// a step, the index it drops alone (On: its table): a change for
	// migrate.Migrate, which self-creation does not make.
	Drops []ident.Table
	// Optional marks a column that stores nothing and serves an index alone
	// (a generated VIRTUAL column): self-creation adds it with a table it
	// makes, and on a table that was there it is Migrate's (with the index
	// on it); no check requires it, and what reads it has a way without it.
	Optional bool
}

// Migration names the migration an object comes from ("0004_outbox_upgrade").
func (o Object) Migration() string { return strings.TrimSuffix(o.File, ".up.sql") }

// ErrSchemaOutdated is returned (wrapped) at start when a table Herald uses
// lacks a table, column or row that a migration makes; the message names the
// migration to run.
var ErrSchemaOutdated = errors.New("schema outdated")
