package admin

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// DefaultRelayTimeout is the default Config.RelayTimeout: a relay seen (a
// heartbeat, or a partition lease it holds) within the last minute is alive.
const DefaultRelayTimeout = time.Minute

// Relays is what the database says of the relays of the outbox: each relay
// instance with when it last said it was alive, the partition leases of
// ordered mode by owner, and the backlog that is due. Unordered relays record
// a heartbeat every 10 seconds, ordered ones every third of their
// LeaseDuration (when they renew their leases), in the instance table
// <outbox>_relays; every age is measured by the database's clock.
type Relays struct {
	// Known is false when the instance table does not exist: no relay of
	// this version has run on the outbox, so whether one runs is unknown.
	Known bool `json:"known"`
	// AliveWithinSeconds is Config.RelayTimeout in seconds: a relay seen
	// within it is alive.
	AliveWithinSeconds float64 `json:"alive_within_seconds"`
	// Alive counts the relays alive: instances seen within
	// AliveWithinSeconds, or holding an unexpired partition lease.
	Alive int `json:"alive"`
	// LastSeenSeconds is how long ago a relay was last seen (its latest
	// heartbeat, or the end of a lease that ended); nil when none ever was
	// or its row is gone (a relay that stops in ordered mode deletes its
	// row and gives its leases back; any other row is pruned after a day).
	LastSeenSeconds *float64 `json:"last_seen_seconds"`
	// Instances are the relays the database knows, alive or not, the alive
	// first, then the most recently seen.
	Instances []RelayInstance `json:"instances"`
	// Ordered is true when the outbox is relayed in ordered mode: a relay
	// alive holds partition leases or, none does, an ordered relay ran on
	// it (its partitions' rows are in the lease table; a fleet's ordered
	// tenant gives its leases back after each run, and its row may outlive
	// them a moment). False where no ordered relay ever ran; an outbox
	// moved from ordered to unordered mode still counts as ordered.
	Ordered bool `json:"ordered"`
	// Due counts the pending events whose next attempt is due, and
	// OverdueSeconds is how long the longest-due of them has been due.
	Due            int64   `json:"due"`
	OverdueSeconds float64 `json:"overdue_seconds"`
	// Problem says, when the relays look gone, what is wrong: due events
	// waiting longer than AliveWithinSeconds and no relay alive. Empty
	// otherwise.
	Problem string `json:"problem,omitempty"`
}

// RelayInstance is one relay instance (relay.Config.InstanceID): when it
// last recorded a heartbeat and, in ordered mode, the partition leases it
// holds.
type RelayInstance struct {
	Instance string `json:"instance"`
	// SeenSecondsAgo is how long ago its last heartbeat was; nil when it
	// has no row (a lease owner whose row is gone).
	SeenSecondsAgo *float64 `json:"seen_seconds_ago"`
	// Partitions counts the partition leases it owns (ordered mode), and
	// LeaseLeftSeconds is the time left on the latest of them (negative: it
	// ended that long ago, the instance stopped renewing); nil without.
	Partitions       int      `json:"partitions,omitempty"`
	LeaseLeftSeconds *float64 `json:"lease_left_seconds,omitempty"`
	// Alive: seen within Config.RelayTimeout, or holding an unexpired lease.
	Alive bool `json:"alive"`
}

func secs(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}

// ordered reports whether the outbox is relayed in ordered mode (Ordered).
// False for nil.
func (r *Relays) ordered() bool { return r != nil && r.Ordered }

// LastSeen is LastSeenSeconds as a duration, and whether a relay was seen.
func (r Relays) LastSeen() (time.Duration, bool) {
	if r.LastSeenSeconds == nil {
		return 0, false
	}
	return time.Duration(*r.LastSeenSeconds * float64(time.Second)), true
}

// Relays reads what the database says of the relays of the outbox: the
// instance table, the partition leases (ordered mode) and the due backlog.
// It costs three reads: the instance table (a row per relay), the lease
// table (a row per partition) and the due pending events; a fourth, of one
// row of the lease table, when no relay alive holds a lease (Ordered).
func (o *Outbox) Relays(ctx context.Context) (Relays, error) {
	rs := Relays{AliveWithinSeconds: o.cfg.RelayTimeout.Seconds(), Instances: []RelayInstance{}}
	hb := o.drv.Heartbeats(o.table)
	n, overdue, err := hb.Due(ctx, o.db)
	if err != nil {
		return Relays{}, fmt.Errorf("admin: relays: due events: %w", err)
	}
	overdue = max(overdue, 0)
	rs.Due, rs.OverdueSeconds = n, overdue.Seconds()
	var lastSeen *time.Duration
	seen := func(d time.Duration) {
		d = max(d, 0)
		if lastSeen == nil || d < *lastSeen {
			lastSeen = &d
		}
	}
	ok, err := o.drv.Outbox(o.table.Derived("_relays")).Exists(ctx, o.db)
	if err != nil {
		return Relays{}, fmt.Errorf("admin: relays: %w", err)
	}
	if ok {
		rs.Known = true
		is, err := hb.Instances(ctx, o.db)
		if err != nil {
			return Relays{}, fmt.Errorf("admin: relays: instances: %w", err)
		}
		for _, i := range is {
			ago := max(i.Ago, 0)
			rs.Instances = append(rs.Instances, RelayInstance{Instance: i.Instance, SeenSecondsAgo: secs(ago), Alive: ago <= o.cfg.RelayTimeout})
			seen(ago)
		}
	}
	ok, err = o.drv.Outbox(o.table.Derived("_leases")).Exists(ctx, o.db)
	if err != nil {
		return Relays{}, fmt.Errorf("admin: relays: %w", err)
	}
	if ok {
		ls, err := hb.Leases(ctx, o.db)
		if err != nil {
			return Relays{}, fmt.Errorf("admin: relays: leases: %w", err)
		}
		idx := map[string]int{}
		for i, in := range rs.Instances {
			idx[in.Instance] = i
		}
		for _, l := range ls {
			i, found := idx[l.Owner]
			if !found {
				i = len(rs.Instances)
				idx[l.Owner] = i
				rs.Instances = append(rs.Instances, RelayInstance{Instance: l.Owner})
			}
			in := &rs.Instances[i]
			in.Partitions, in.LeaseLeftSeconds = l.Partitions, secs(l.Left)
			if l.Left > 0 {
				in.Alive = true
				seen(0)
			} else {
				seen(-l.Left)
			}
		}
	}
	for _, i := range rs.Instances {
		if i.Alive {
			rs.Alive++
			rs.Ordered = rs.Ordered || i.Partitions > 0
		}
	}
	if ok && !rs.Ordered { // the lease table exists: did an ordered relay run?
		if rs.Ordered, err = hb.Seeded(ctx, o.db); err != nil {
			return Relays{}, fmt.Errorf("admin: relays: partitions: %w", err)
		}
	}
	slices.SortStableFunc(rs.Instances, func(a, b RelayInstance) int {
		switch {
		case a.Alive == b.Alive:
			return 0
		case a.Alive:
			return -1
		}
		return 1
	})
	if lastSeen != nil {
		rs.LastSeenSeconds = secs(*lastSeen)
	}
	if rs.Known && rs.Alive == 0 && rs.Due > 0 && overdue > o.cfg.RelayTimeout {
		none := "no relay has been seen"
		if d, ok := rs.LastSeen(); ok {
			none = "no relay seen for " + Age(d.Truncate(time.Second))
		}
		due := fmt.Sprintf("%d events are due", rs.Due)
		if rs.Due == 1 {
			due = "1 event is due"
		}
		rs.Problem = fmt.Sprintf("%s while %s, the longest for %s", none, due, Age(overdue.Truncate(time.Second)))
	}
	return rs, nil
}
