package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Stats is a snapshot of the outbox, as the relay sees it.
type Stats struct {
	// Pending is the number of events not yet published and not dead.
	Pending int64
	// Failing is the number of pending events whose publish failed at least
	// once (attempts > 0), waiting for a retry. Events that keep failing while
	// nothing confirms the failures are their own (a broker outage, or a topic
	// refused with no other traffic) stay here, retried every MaxBackoff, and
	// never die: watch Failing and OldestPending.
	Failing int64
	// Dead is the number of dead events, waiting to be requeued.
	Dead int64
	// OldestPending is the age of the oldest pending event (since its insert
	// or, for a requeued event, its last requeue; a scheduled event counts
	// only once due, from its due time); 0 when none is pending. In ordered
	// mode it leaves out the events held in line behind a pending event of
	// their aggregate scheduled in line (not Schedule.Apart): until that one
	// is due they wait by design, and from then on it is counted itself,
	// from its due time, for its whole line. They are counted in Pending.
	OldestPending time.Duration
	// Scheduled is the number of scheduled events (events.Schedule) not yet
	// published and not dead, due or not; they are counted in Pending too.
	Scheduled int64
	// NextScheduled is how long until the earliest scheduled event that is
	// not due yet comes due, by the database's clock; 0 when none waits.
	NextScheduled time.Duration
	// Overdue is how long ago the earliest scheduled event that is due and
	// not published yet came due, by the database's clock; 0 when none is.
	// While relays keep up it stays below a PollInterval (a relay waits no
	// longer than the next due time); growing, the event is not being
	// published: it fails (Failing), or no relay runs.
	Overdue time.Duration
	// DeadTuples is the database's estimate of the outbox table's dead row
	// versions: published rows deleted (or updated, with a Retention) that
	// vacuum has not removed yet, summed over partitions (PostgreSQL's
	// pg_stat_all_tables.n_dead_tup; 0 on SQLite and MySQL). It climbs while
	// a transaction holds back vacuum's horizon (see OldestTransactionAge).
	DeadTuples int64
	// TableBytes is the outbox table's size with its indexes, summed over
	// partitions (PostgreSQL; 0 where unknown).
	TableBytes int64
	// OldestTransactionAge is the age of the oldest transaction that holds
	// back vacuum's horizon (one that holds a transaction id or a snapshot,
	// or a prepared transaction), other than the one reading it; 0 when none.
	// PostgreSQL shows other roles' sessions only to a superuser or a member
	// of pg_read_all_stats: without that OldestTransactionKnown is false and
	// the age 0. Always unknown on SQLite and MySQL.
	OldestTransactionAge   time.Duration
	OldestTransactionKnown bool
	// Published, Failed and Died count this relay's publishes since it started:
	// events published, failed attempts, and events that went dead. They are
	// counted when the batch's Publish calls are done, before its marks commit
	// (an event whose marks were lost is published, and counted, again).
	Published, Failed, Died int64
}

// Stats reads the pending, failing and dead counts, the oldest pending
// event's age, the scheduled events' figures and the storage figures from
// the database, and adds this relay's counters.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	s, _, err := r.stats(ctx)
	return s, err
}

// stats is Stats, with the store's figures as read.
func (r *Relay) stats(ctx context.Context) (Stats, store.Stats, error) {
	st, err := r.st.Stats(ctx, r.db)
	if err != nil {
		return Stats{}, st, fmt.Errorf("relay: stats: %w", err)
	}
	s := Stats{Pending: st.Pending, Failing: st.Failing, Dead: st.Dead, OldestPending: st.OldestPending,
		Scheduled: st.Scheduled, NextScheduled: st.NextScheduled, Overdue: st.Overdue,
		DeadTuples: st.DeadTuples, TableBytes: st.TableBytes,
		OldestTransactionAge: st.OldestXact, OldestTransactionKnown: st.OldestXactKnown}
	if r.cfg.Ordered && st.Scheduled > 0 {
		// Events held in line behind a scheduled event wait by design.
		age, err := r.st.OldestUnheld(ctx, r.db)
		if err != nil {
			return Stats{}, st, fmt.Errorf("relay: stats: %w", err)
		}
		s.OldestPending = age
	}
	s.Published, s.Failed, s.Died = r.m.published.Load(), r.m.failed.Load(), r.m.dead.Load()
	return s, st, nil
}
