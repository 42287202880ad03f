package sqlkit

import (
	"slices"
)

// Buckets maps aggregate lock keys to their rows of the locks table, sorted
// and without repeats: the order writers lock them in.
func Buckets(keys []int64) []int64 {
	b := make([]int64, len(keys))
	for i, k := range keys {
		b[i] = int64(uint64(k) % LockBuckets)
	}
	slices.Sort(b)
	return slices.Compact(b)
}

// LockBuckets is how many rows an aggregate locks table holds (made by the
// migrations, MySQL's and PostgreSQL's): aggregates are hashed into them, and
// two aggregates in one bucket serialize their writers, harmlessly. A
// transaction then holds row locks, which cost no entry in the database's
// lock table (PostgreSQL keeps them in the rows), however many aggregates it
// writes.
const LockBuckets = 1 << 16
