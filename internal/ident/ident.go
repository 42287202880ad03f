// Package ident owns Herald's SQL identifiers: it validates the table and
// channel names users configure, derives the names of the objects Herald makes
// beside a table (indexes, lease tables), and quotes them. Every package that
// puts a name into SQL goes through it, so a name means the same object
// everywhere (mixed case included: names are always quoted, never folded).
package ident

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MaxLen is the longest identifier accepted, PostgreSQL's limit (63 bytes); a
// longer name would be silently truncated there, so that two names could
// collide.
const MaxLen = 63

// maxSuffix is the longest suffix Herald derives names with
// ("_aggregate_idx"), so that every derived name stays within MaxLen. The
// names of partitions are longer: see [Table.CheckPartitioned].
const maxSuffix = len("_aggregate_idx")

// partitionLayout formats the UTC start of a partition's range in its name.
const partitionLayout = "20060102t150405"

// partitionSuffix is the length of the suffix of a partition's name: "_p"
// and the start of its range.
const partitionSuffix = len("_p") + len(partitionLayout)

// MaxPartitionedLen is the longest name of a table Herald partitions
// (46 bytes), so that the names of its partitions stay within MaxLen.
const MaxPartitionedLen = MaxLen - partitionSuffix

var plain = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Name is a validated SQL identifier, kept in the case it was given.
type Name string

// ParseName checks that s is a plain identifier (a letter or underscore, then
// letters, digits and underscores) of at most MaxLen bytes.
func ParseName(s string) (Name, error) {
	if !plain.MatchString(s) {
		return "", fmt.Errorf("%q is not a plain identifier (letters, digits, underscores; not starting with a digit)", s)
	}
	if len(s) > MaxLen {
		return "", fmt.Errorf("%q is longer than %d bytes", s, MaxLen)
	}
	return Name(s), nil
}

// Quoted returns the name in double quotes, as PostgreSQL and SQLite (and
// MySQL in ANSI_QUOTES mode) read an identifier without folding its case.
func (n Name) Quoted() string { return `"` + string(n) + `"` }

// Table is a validated table name, optionally schema-qualified.
type Table struct {
	Schema Name // empty: the connection's search path
	Name   Name
}

// ParseTable checks s, "table" or "schema.table", and returns it. The table
// part leaves room for the suffixes of derived names.
func ParseTable(s string) (Table, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return Table{}, fmt.Errorf("table %q: at most schema.table", s)
	}
	var t Table
	var err error
	if t.Name, err = ParseName(parts[len(parts)-1]); err != nil {
		return Table{}, fmt.Errorf("table %q: %w", s, err)
	}
	if len(t.Name)+maxSuffix > MaxLen {
		return Table{}, fmt.Errorf("table %q: name longer than %d bytes leaves no room for derived names", s, MaxLen-maxSuffix)
	}
	if len(parts) == 2 {
		if t.Schema, err = ParseName(parts[0]); err != nil {
			return Table{}, fmt.Errorf("table %q: %w", s, err)
		}
	}
	return t, nil
}

// MustTable is ParseTable for names known to be valid; it panics otherwise.
func MustTable(s string) Table {
	t, err := ParseTable(s)
	if err != nil {
		panic(err)
	}
	return t
}

// String returns the name as given: "schema.table" or "table".
func (t Table) String() string {
	if t.Schema == "" {
		return string(t.Name)
	}
	return string(t.Schema) + "." + string(t.Name)
}

// Quoted returns the quoted, qualified name: "schema"."table" or "table".
func (t Table) Quoted() string {
	if t.Schema == "" {
		return t.Name.Quoted()
	}
	return t.Schema.Quoted() + "." + t.Name.Quoted()
}

// Derived returns the name of an object Herald keeps beside t: the same schema,
// the table's name followed by suffix ("_leases", "_pending_idx").
func (t Table) Derived(suffix string) Table {
	return Table{Schema: t.Schema, Name: t.Name + Name(suffix)}
}

// Partition returns the name of t's range partition starting at start: t's
// name followed by "_p" and the start in UTC ("outbox_p20240131t000000"). It
// is within MaxLen when t passes CheckPartitioned.
func (t Table) Partition(start time.Time) Table {
	return t.Derived("_p" + start.UTC().Format(partitionLayout))
}

// CheckPartitioned reports an error when t's name is too long for the names
// of its partitions (longer than MaxPartitionedLen): PostgreSQL would
// truncate them, and partitions of neighbouring ranges would collide.
func (t Table) CheckPartitioned() error {
	if len(t.Name) > MaxPartitionedLen {
		return fmt.Errorf("table %q: a partitioned table's name must be at most %d bytes, leaving room for its partitions' names", t, MaxPartitionedLen)
	}
	return nil
}
