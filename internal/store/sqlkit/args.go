package sqlkit

import "strings"

// Placeholders returns "?, ?, ..." for n values: the parameter list of a
// statement of MySQL or SQLite.
func Placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// Anys returns xs as statement arguments.
func Anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// OrderedClaim returns q, the ordered claim of MySQL or SQLite, with its
// list of owned partitions ({owned}, in each of its two branches) made of
// placeholders, and its arguments: each branch's (the partition count, the
// owned partitions, limit), then limit again for the union of both.
func OrderedClaim(q string, limit, partitions int, owned []int32) (string, []any) {
	q = strings.ReplaceAll(q, "{owned}", Placeholders(len(owned)))
	branch := append(append([]any{partitions}, Anys(owned)...), limit)
	return q, append(append(append([]any{}, branch...), branch...), limit)
}
