package walrelay

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// Parking: the events the broker refuses (and, in ordered mode, the later
// events of their aggregates) written as rows of the outbox table
// (Config.Table), where a table relay retries and dead-letters them; once
// written they are settled.

// loadParked reads which aggregates have pending events in the table
// (ordered mode), parked by an earlier session or another relay.
func (s *session) loadParked(ctx context.Context) error {
	s.parked = map[string]bool{}
	if !s.r.cfg.Ordered {
		return nil
	}
	aggs, err := s.r.parking.PendingAggregates(ctx, s.db)
	if err != nil {
		return fmt.Errorf("walrelay: read pending aggregates: %w", err)
	}
	for _, a := range aggs {
		s.parked[a.Type+"\x00"+a.ID] = true
	}
	return nil
}

// parkBehind parks h (ordered mode) when its aggregate has events in the
// table not yet published or dead, reporting whether it did; an aggregate
// with none left there is forgotten: its events flow from the WAL again.
func (s *session) parkBehind(ctx context.Context, h *held) (bool, error) {
	if !s.parked[h.agg] {
		return false, nil
	}
	pending, err := s.r.parking.AggregatePending(ctx, s.db, store.Aggregate{Type: h.row.AggregateType, ID: h.row.AggregateID})
	if err != nil {
		return false, fmt.Errorf("walrelay: read parked events of %s %s: %w", h.row.AggregateType, h.row.AggregateID, err)
	}
	if pending {
		return true, s.park(ctx, []*held{h})
	}
	delete(s.parked, h.agg) // its events flow from the WAL again
	return false, nil
}

// parkWith parks h and, in ordered mode, the held events of its aggregate
// behind it.
func (s *session) parkWith(ctx context.Context, h *held) error {
	items := []*held{h}
	if s.r.cfg.Ordered && h.agg != "" {
		for _, o := range s.held {
			if o != h && o.agg == h.agg {
				items = append(items, o)
			}
		}
	}
	return s.park(ctx, items)
}

// park writes items, in order, as rows of the outbox table, each that
// failed with its attempt and last error, in one transaction; once it
// committed they are settled.
func (s *session) park(ctx context.Context, items []*held) error {
	rows := make([]store.Row, len(items))
	var fails []store.Failure
	for i, h := range items {
		rows[i] = h.row
		if h.err != nil {
			// A confirmed failure (a strike), due at once: the table
			// relay's backoff applies from its first retry.
			fails = append(fails, store.Failure{ID: h.row.ID, Err: outbound.LastError(h.err), Strike: true})
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("walrelay: park: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, _, err := s.r.outbox.Insert(ctx, tx, store.OutboxInsertParams{Rows: rows}); err != nil {
		return fmt.Errorf("walrelay: park: insert: %w", err)
	}
	if len(fails) > 0 {
		if err := s.r.parking.MarkFailed(ctx, tx, fails); err != nil {
			return fmt.Errorf("walrelay: park: mark failed: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("walrelay: park: commit: %w", err)
	}
	s.r.m.parked(len(items))
	s.remove(items)
	if s.r.cfg.Ordered {
		for _, h := range items {
			if h.agg != "" {
				s.parked[h.agg] = true
			}
		}
	}
	s.advance()
	return nil
}
