package sqlkit

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// errNotAll rolls back a RequeueEach transaction in which some id was not a
// dead event.
var errNotAll = errors.New("not every id is a dead event")

// RequeueEach is store.RequeueIDs on top of a driver's requeue of one id in a
// transaction: in one transaction begun on db with opts, each id requeued;
// when some id is not a dead event, the transaction is rolled back and those
// ids are returned.
func RequeueEach(ctx context.Context, db store.DB, opts *sql.TxOptions, requeue func(context.Context, store.Execer, string) (bool, error), ids []string) ([]string, error) {
	var notDead []string
	err := InTx(ctx, db, opts, func(tx store.Execer) error {
		for _, id := range ids {
			ok, err := requeue(ctx, tx, id)
			if err != nil {
				return err
			}
			if !ok {
				notDead = append(notDead, id)
			}
		}
		if len(notDead) > 0 {
			return errNotAll
		}
		return nil
	})
	if errors.Is(err, errNotAll) {
		return notDead, nil
	}
	return nil, err
}

// ScanTopics runs topics, whose rows are (topic, pending, failing, dead, age
// of the oldest pending event in microseconds or NULL), then published, whose
// rows are (topic, events published within the last minute), and returns the
// figures of every topic either names, in topic order.
func ScanTopics(ctx context.Context, x store.Execer, topics, published string) ([]store.TopicStats, error) {
	stats, err := Collect(ctx, x, topics, nil, func(rows *sql.Rows) (*store.TopicStats, error) {
		var (
			s   store.TopicStats
			age sql.NullInt64
		)
		err := rows.Scan(&s.Topic, &s.Pending, &s.Failing, &s.Dead, &age)
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
		return &s, err
	})
	if err != nil {
		return nil, err
	}
	pub, err := Collect(ctx, x, published, nil, func(rows *sql.Rows) (store.TopicStats, error) {
		var s store.TopicStats
		err := rows.Scan(&s.Topic, &s.PublishedLastMinute)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	byTopic := make(map[string]*store.TopicStats, len(stats))
	for _, s := range stats {
		byTopic[s.Topic] = s
	}
	for _, p := range pub {
		if s := byTopic[p.Topic]; s != nil {
			s.PublishedLastMinute = p.PublishedLastMinute
		} else {
			byTopic[p.Topic] = &p
		}
	}
	out := make([]store.TopicStats, 0, len(byTopic))
	for _, s := range byTopic {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, nil
}

// ActChunks runs q, an operator's change of the rows keys name, over chunks
// of at most 1,000 keys (arg makes a chunk q's first argument; more
// follow), at opts, and returns how many rows changed. alone (a purge: each
// chunk stands by itself) commits each chunk in a transaction of its own;
// otherwise (a requeue, which must keep the events' order whole) all run in
// one transaction, and nothing changed when it fails.
func ActChunks[T any](ctx context.Context, db store.DB, opts *sql.TxOptions, alone bool, keys []T, arg func([]T) any, q string, more ...any) (int64, error) {
	var total int64
	chunks := func(x store.Execer, keys []T) error {
		for len(keys) > 0 {
			chunk := keys[:min(len(keys), 1000)]
			keys = keys[len(chunk):]
			n, err := Affected(ctx, x, q, append([]any{arg(chunk)}, more...)...)
			total += n
			if err != nil {
				return err
			}
		}
		return nil
	}
	if !alone {
		if err := InTx(ctx, db, opts, func(tx store.Execer) error { return chunks(tx, keys) }); err != nil {
			return 0, err
		}
		return total, nil
	}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 1000)]
		keys = keys[len(chunk):]
		if err := InTx(ctx, db, opts, func(tx store.Execer) error { return chunks(tx, chunk) }); err != nil {
			return total, err
		}
	}
	return total, nil
}

// ScanDead runs q, a scan of dead events (store.Admin.ScanDead) that returns
// seq, id, type, last error and dead_at (microseconds), and reads its rows.
func ScanDead(ctx context.Context, x store.Execer, q string, args []any) ([]store.DeadBrief, error) {
	return Collect(ctx, x, q, args, func(rows *sql.Rows) (store.DeadBrief, error) {
		var b store.DeadBrief
		err := rows.Scan(&b.Seq, &b.ID, &b.Type, &b.LastError, &b.DeadAt)
		return b, err
	})
}

// DeadSeqs returns the seqs of evs in order: the order a requeue changes
// them in, which keeps each aggregate's events in order.
func DeadSeqs(evs []store.DeadBrief) []int64 {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	slices.Sort(seqs)
	return seqs
}
