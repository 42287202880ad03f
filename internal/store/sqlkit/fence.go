package sqlkit

import (
	"database/sql"
	"fmt"
	"strconv"

	"github.com/heraldgo/herald/internal/store"
)

// ScanLease reads a lease: its partition, then its generation (the rows of
// Renew and Acquire).
func ScanLease(rows *sql.Rows) (store.Lease, error) {
	var l store.Lease
	err := rows.Scan(&l.Partition, &l.Generation)
	return l, err
}

// CheckFence returns store.ErrLeaseLost, naming how many leases were lost,
// when a fenced statement found fewer than all of f's leases held.
func CheckFence(f *store.Fence, held int) error {
	if f != nil && held < len(f.Leases) {
		return fmt.Errorf("%w: %d of %d partitions", store.ErrLeaseLost, len(f.Leases)-held, len(f.Leases))
	}
	return nil
}

// FenceParts returns f's partitions and generations, index by index.
func FenceParts(f *store.Fence) (parts []int32, gens []int64) {
	parts, gens = make([]int32, len(f.Leases)), make([]int64, len(f.Leases))
	for i, l := range f.Leases {
		parts[i], gens[i] = int32(l.Partition), l.Generation
	}
	return parts, gens
}

// FenceJSON returns f's leases as a JSON array of [partition, generation]
// pairs (for drivers that read their arguments with JSON functions).
func FenceJSON(f *store.Fence) string {
	b := append(make([]byte, 0, 2+len(f.Leases)*12), '[')
	for i, l := range f.Leases {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(l.Partition), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, l.Generation, 10)
		b = append(b, ']')
	}
	return string(append(b, ']'))
}
