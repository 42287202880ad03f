package fleet

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/heraldgo/herald/relay"
)

// TenantStatus is what the fleet knows of one tenant without asking its
// database.
type TenantStatus struct {
	// ID is the tenant's.
	ID string
	// State is where the tenant is: "idle" (waiting for its next probe),
	// "probing", "queued" (it has work and waits for a place), "active"
	// (its relay runs), "failing" (backing off after Err) or "elsewhere"
	// (another member serves it).
	State string
	// Member is the fleet process that serves the tenant: this one's
	// Instance, or another member's.
	Member string
	// Err is the error a failing tenant last failed with; nil otherwise.
	Err error
	// Failures is how many tries in a row failed; FailingSince when the
	// last one did.
	Failures     int
	FailingSince time.Time
	// LastWork is when a run last claimed events of the tenant; zero when
	// none did since the fleet started.
	LastWork time.Time
}

// TenantStats is a tenant's status with its outbox's figures, as
// relay.Stats reads them from its database.
type TenantStats struct {
	TenantStatus
	relay.Stats
	// StatsErr is why the figures could not be read (zero figures then).
	StatsErr error
}

// Status returns the fleet's tenants, the failing ones first (the longest
// failing first), then by ID.
func (f *Fleet) Status() []TenantStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]TenantStatus, 0, len(f.tenants))
	for _, t := range f.tenants {
		out = append(out, f.status(t))
	}
	slices.SortFunc(out, func(a, b TenantStatus) int {
		if c := cmp.Compare(b.Failures, a.Failures); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

func (f *Fleet) status(t *tenant) TenantStatus {
	s := TenantStatus{ID: t.def.ID, State: t.st.String(), Member: f.cfg.Relay.InstanceID,
		Err: t.err, Failures: t.fails, LastWork: t.worked}
	if t.fails > 0 {
		s.FailingSince = t.failedAt
	}
	if t.st == elsewhere && f.members != nil {
		s.Member = owner(f.members, t.def.ID)
	}
	return s
}

// Stats reads the outbox figures of every tenant this process serves (the
// others' are their members'), Probes at a time, each on a connection of the
// budget (an idle tenant's pool opened for it and closed after), and
// returns them worst first: failing tenants, then by oldest pending age,
// then by backlog. Before Run, it lists the tenants (Config.Tenants) first.
func (f *Fleet) Stats(ctx context.Context) ([]TenantStats, error) {
	f.mu.Lock()
	listed := f.listed
	f.mu.Unlock()
	if !listed { // before Run: the tenants Config.Tenants returns
		f.refresh(ctx)
	}
	f.mu.Lock()
	var ts []*tenant
	for _, t := range f.tenants {
		if t.st != elsewhere {
			ts = append(ts, t)
		}
	}
	f.mu.Unlock()
	out := make([]TenantStats, len(ts))
	sem := make(chan struct{}, f.cfg.Probes)
	done := make(chan struct{})
	for i, t := range ts {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; done <- struct{}{} }()
			out[i] = f.tenantStats(ctx, t)
		}()
	}
	for range ts {
		<-done
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b TenantStats) int {
		if c := cmp.Compare(b.Failures, a.Failures); c != 0 {
			return c
		}
		if c := cmp.Compare(b.OldestPending, a.OldestPending); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Pending, a.Pending); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// tenantStats reads t's figures through its pool, or a pool of its own
// while the tenant's is closed.
func (f *Fleet) tenantStats(ctx context.Context, t *tenant) TenantStats {
	f.mu.Lock()
	s := TenantStats{TenantStatus: f.status(t)}
	p := t.pool
	f.mu.Unlock()
	if err := f.conns.acquire(ctx, 1); err != nil {
		s.StatsErr = err
		return s
	}
	defer f.conns.release(1)
	if p == nil {
		db := t.def.DB
		if db == nil {
			var err error
			if db, err = t.def.Open(ctx); err != nil {
				s.StatsErr = err
				return s
			}
			defer closeDB(db)
		}
		var err error
		if p, err = f.newPool(t, db); err != nil {
			s.StatsErr = err
			return s
		}
	}
	s.Stats, s.StatsErr = p.rel.Stats(ctx)
	return s
}
