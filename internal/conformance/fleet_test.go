package conformance

// The fleet: every relay guarantee holds per tenant when the relay is one
// tenant's in a fleet.Fleet. The fleet group runs the relay's and the
// scheduled events' tests again, each test's relays made fleets of one
// tenant (the test's outbox, on the test's pool) with the test's relay
// configuration: the fleet probes, runs and stops that relay as it does any
// tenant's, so that a guarantee its runs would break (a batch cut short, a
// retry or a scheduled event never due to the probes, a lease left) fails
// here.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/relay"
)

// fleetTests are the relay's and the scheduled events' tests but those
// whose relay is not made by relayEnv.relay (a relay in a child process:
// StoppedProcessPastItsLease; the leases' schema: LeaseGenerations), and one
// that watches an ordered relay hold its partitions between batches, which a
// fleet's relay, run while its tenant has work, gives back when done:
// OrderedTakeover (two relays share the partitions, one dies holding them;
// between fleet members a tenant moves as a whole: fleet's
// TestMembersShareTenants and the fleetchaos run).
var fleetTests = func() []namedTest {
	skip := []string{"StoppedProcessPastItsLease", "LeaseGenerations", "OrderedTakeover"}
	var out []namedTest
	for _, tc := range slices.Concat(relayTests, scheduleTests) {
		if !slices.Contains(skip, tc.name) {
			out = append(out, tc)
		}
	}
	return out
}()

// viaFleet tells whether t runs in the suite's fleet group.
func viaFleet(t *testing.T) bool { return strings.Contains(t.Name(), "/fleet/") }

// fleetTenant is the one tenant's ID.
const fleetTenant = "conformance"

// fleetProbe is the fleet's longest wait between probes of an idle tenant
// (MaxProbe), at which a writer that does not wake the fleet is seen: the
// suite's waits are made for a relay polling every PollInterval.
const fleetProbe = 250 * time.Millisecond

// fleetOfOne is a fleet whose one tenant is a test's outbox.
type fleetOfOne struct{ *fleet.Fleet }

func newFleetOfOne(t *testing.T, db *gorm.DB, pub message.Publisher, cfg relay.Config) relayer {
	t.Helper()
	// The tenant's relay objects made first, as a fleet's tenants are
	// migrated (docs/tenants.md): made at a tenant's first run, an index
	// build on MySQL would take its table's metadata lock while the test's
	// writers run.
	r, err := relay.New(db, pub, cfg)
	must(t, err)
	must(t, r.Setup(t.Context()))
	f, err := fleet.New(pub, fleet.Config{
		Tenants: func(context.Context) ([]fleet.Tenant, error) {
			return []fleet.Tenant{{ID: fleetTenant, DB: db}}, nil
		},
		Relay:    cfg,
		MaxProbe: fleetProbe,
		Logger:   cfg.Logger,
	})
	must(t, err)
	return fleetOfOne{f}
}

// Wake wakes the tenant, as the writers' Notify does.
func (f fleetOfOne) Wake() { f.Fleet.Wake(fleetTenant) }

// Stats returns the tenant's outbox figures, as the fleet reads them.
func (f fleetOfOne) Stats(ctx context.Context) (relay.Stats, error) {
	ts, err := f.Fleet.Stats(ctx)
	if err != nil {
		return relay.Stats{}, err
	}
	for _, s := range ts {
		if s.ID == fleetTenant {
			return s.Stats, s.StatsErr
		}
	}
	return relay.Stats{}, errors.New("the fleet's stats have no tenant " + fleetTenant)
}
