package sqlkit

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/store"
)

// QueryRow scans the one row q returns into dest; sql.ErrNoRows when it
// returns none.
func QueryRow(ctx context.Context, x store.Execer, q string, args []any, dest ...any) error {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// Column runs q and returns the one column of its rows.
func Column[T any](ctx context.Context, x store.Execer, q string, args ...any) ([]T, error) {
	return Collect(ctx, x, q, args, func(rows *sql.Rows) (T, error) {
		var v T
		err := rows.Scan(&v)
		return v, err
	})
}

// Collect runs q and returns its rows, each read by scan.
func Collect[T any](ctx context.Context, x store.Execer, q string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Affected runs q and returns how many rows it changed.
func Affected(ctx context.Context, x store.Execer, q string, args ...any) (int64, error) {
	res, err := x.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// InsertedOne runs q, an INSERT of one row into the table t that adds
// nothing where the row exists (ON CONFLICT DO NOTHING), and reports whether
// it added the row; a table that missing says is absent is
// store.ErrTableMissing (wrapped).
func InsertedOne(ctx context.Context, x store.Execer, t fmt.Stringer, missing func(error) bool, q string, args ...any) (bool, error) {
	n, err := Affected(ctx, x, q, args...)
	if err != nil {
		return false, TableError(t, missing, err)
	}
	return n == 1, nil
}

// TableError is err, wrapped with store.ErrTableMissing naming t when
// missing (the driver's test) says t does not exist; nil for nil.
func TableError(t fmt.Stringer, missing func(error) bool, err error) error {
	if err != nil && missing(err) {
		return fmt.Errorf("%w: %s: %w", store.ErrTableMissing, t, err)
	}
	return err
}

// Probes reports which of names have a row, in one query: for each name
// holds accepts (the others are false), probe returns a statement that
// yields i when the name has a row (a LIMIT 1 read of an index) and its
// arguments, given the arguments so far (PostgreSQL numbers its
// placeholders from them); the statements are joined with UNION ALL.
// missing tells that the table t does not exist (TableError).
func Probes(ctx context.Context, x store.Execer, t fmt.Stringer, missing func(error) bool, names []string,
	holds func(string) bool, probe func(i int, name string, args []any) (string, []any)) ([]bool, error) {
	out := make([]bool, len(names))
	var (
		parts []string
		args  []any
	)
	for i, name := range names {
		if !holds(name) {
			continue
		}
		var part string
		part, args = probe(i, name, args)
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return out, nil
	}
	found, err := Column[int](ctx, x, strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, TableError(t, missing, err)
	}
	for _, i := range found {
		out[i] = true
	}
	return out, nil
}

// Savepoint runs f in the transaction tx under a savepoint (SAVEPOINT name,
// which every database Herald runs on knows): released when f returns nil,
// rolled back to when it fails, which undoes f's writes alone and leaves tx
// usable (on PostgreSQL a failed statement otherwise aborts the whole
// transaction). It returns f's error, or one wrapping store.ErrTxLost when the
// savepoint itself fails (MySQL rolls a deadlocked transaction back whole).
func Savepoint(ctx context.Context, tx store.Execer, name string, f func() error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%w: savepoint: %w", store.ErrTxLost, err)
	}
	if err := f(); err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name); rerr != nil {
			return fmt.Errorf("%w: rollback to savepoint: %w (after %w)", store.ErrTxLost, rerr, err)
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%w: release savepoint: %w", store.ErrTxLost, err)
	}
	return nil
}

// FoundIDs reads the ids q returns (one text column) into a set; ids that do not
// parse are skipped.
func FoundIDs(ctx context.Context, x store.Execer, q string, args ...any) (map[uuid.UUID]bool, error) {
	ids, err := Column[string](ctx, x, q, args...)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]bool, len(ids))
	for _, s := range ids {
		if u, err := uuid.Parse(s); err == nil {
			out[u] = true
		}
	}
	return out, nil
}

// FoundIn is FoundIDs for databases with ? placeholders: it looks ids up with
// head followed by "(?, ?, ...)", at most 500 ids a query. head selects the id
// as text and ends in "WHERE id IN ".
func FoundIn(ctx context.Context, x store.Execer, head string, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	out := make(map[uuid.UUID]bool, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id.String()
		}
		found, err := FoundIDs(ctx, x, head+"("+Placeholders(len(chunk))+")", args...)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, found)
	}
	return out, nil
}

// Found reports whether q returns a row (a step's check, a catalog lookup).
func Found(ctx context.Context, x store.Execer, q string, args ...any) (bool, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer func() { _ = rows.Close() }()
	found := rows.Next()
	return found, rows.Err()
}

// InTx runs f in a transaction begun on db with opts, committed when f
// returns nil and rolled back otherwise.
func InTx(ctx context.Context, db store.DB, opts *sql.TxOptions, f func(tx store.Execer) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
