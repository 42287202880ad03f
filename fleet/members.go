package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/store"
)

// members is the fleet processes sharing the tenants through a control
// database: each beats in herald_fleet_relays, and every member's list of the
// live ones (seen within the TTL, by the database's clock) decides which
// tenants it serves.
type members struct {
	hb     store.Heartbeats
	leases store.Leases
	db     *sql.DB
	self   string
	ttl    time.Duration
	made   bool
	beats  int
}

func newMembers(db *gorm.DB, self string, ttl time.Duration) (*members, error) {
	conn, err := drivers.Open(db, store.FleetTable)
	if err != nil {
		return nil, fmt.Errorf("fleet: members: %w", err)
	}
	return &members{hb: conn.Driver.Heartbeats(conn.Table), leases: conn.Driver.Relay(conn.Table).Leases(),
		db: conn.DB, self: self, ttl: ttl}, nil
}

// beat records that this member is alive and returns the live members,
// sorted (itself among them).
func (m *members) beat(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.ttl/3)
	defer cancel()
	if !m.made {
		if err := m.hb.Create(ctx, m.db); err != nil {
			return nil, fmt.Errorf("create the members table: %w", err)
		}
		m.made = true
	}
	if err := m.hb.Beat(ctx, m.db, m.self); err != nil {
		return nil, err
	}
	if m.beats++; m.beats%30 == 1 { // now and then: members gone long ago
		if err := m.hb.Prune(ctx, m.db, 20*m.ttl); err != nil {
			return nil, err
		}
	}
	seen, err := m.hb.Instances(ctx, m.db)
	if err != nil {
		return nil, err
	}
	live := []string{m.self}
	for _, s := range seen {
		if s.Ago < m.ttl && s.Instance != m.self {
			live = append(live, s.Instance)
		}
	}
	slices.Sort(live)
	return live, nil
}

// leave deletes this member's row, so that the others take its tenants at
// their next beat instead of after the TTL.
func (m *members) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	_ = m.leases.Leave(ctx, m.db, m.self)
}

// owner is the member that serves tenant among live: the highest score of
// rendezvous hashing, so that a member that comes or goes moves only the
// tenants it gains or had.
func owner(live []string, tenant string) string {
	var best string
	var top uint64
	for _, m := range live {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(tenant))
		if s := mix(h.Sum64()); best == "" || s > top {
			best, top = m, s
		}
	}
	return best
}

// mix spreads a hash's bits (FNV's high bits vary little with the last
// bytes): the finalizer of SplitMix64.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// owns reports whether this member serves tenant id.
func (f *Fleet) owns(id string) bool {
	return f.members == nil || owner(f.members, id) == f.cfg.Relay.InstanceID
}

// assign makes live the members and moves the tenants: those that hash
// elsewhere now stop (their run ends its batch first), those that hash here
// are probed at once.
func (f *Fleet) assign(live []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Equal(live, f.members) {
		return
	}
	f.log.Info("fleet: members changed", "members", live)
	f.members = live
	for _, t := range f.tenants {
		mine := f.owns(t.def.ID)
		switch {
		case mine && t.st == elsewhere:
			t.st, t.every = idle, f.cfg.MinProbe
			f.schedule(t, time.Time{})
		case !mine && t.st == active:
			t.stop(stopMoved)
		case !mine && t.st == queued:
			f.dequeue(t)
			t.st = elsewhere
			f.closePool(t)
		case !mine && (t.st == idle || t.st == failing):
			t.st = elsewhere
			f.closePool(t)
		}
	}
}
