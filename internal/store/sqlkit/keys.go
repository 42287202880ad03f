package sqlkit

import (
	"context"
	"fmt"
	"strconv"

	"github.com/heraldgo/herald/internal/store"
)

// Key names a claimed row to mark: its ID, its Seq as claimed, and the
// claim's Lease (0: none). A mark of a key with a lease changes the row only
// while the row still holds that lease: once it ended and another relay
// claimed the row again, the mark of the first claim changes nothing.
type Key struct {
	ID    string
	Seq   int64
	Lease int64
}

// IDs returns the keys' ids.
func IDs(keys []Key) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}

// ExecSeqs runs q with one argument, the keys' seqs as a JSON array (the marks
// of drivers that find rows by seq); nothing for no keys.
func ExecSeqs(ctx context.Context, x store.Execer, q string, keys []Key) error {
	if len(keys) == 0 {
		return nil
	}
	seqs, err := SeqsJSON(keys)
	if err != nil {
		return err
	}
	_, err = x.ExecContext(ctx, q, seqs)
	return err
}

// SeqsJSON returns the keys' seqs as a JSON array, or an error when a key has
// none.
func SeqsJSON(keys []Key) (string, error) {
	seqs := make([]int64, len(keys))
	for i, k := range keys {
		if k.Seq <= 0 {
			return "", fmt.Errorf("event %s claimed without its seq", k.ID)
		}
		seqs[i] = k.Seq
	}
	return JSONInts(seqs), nil
}

// JSONInts returns xs as a JSON array.
func JSONInts(xs []int64) string {
	b := append(make([]byte, 0, 2+len(xs)*8), '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(append(b, ']'))
}
