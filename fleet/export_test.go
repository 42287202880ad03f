package fleet

import "time"

// PrefetchedChecks is how many tenant relays' first runs checked their
// schema from the catalog read made at their shared pool's probe.
func PrefetchedChecks(f *Fleet) int64 { return f.prefetchedChecks.Load() }

// SetProbeTimeout sets how long f's probes of a tenant alone may take
// (probeTimeout), before Run.
func SetProbeTimeout(f *Fleet, d time.Duration) { f.probeTimeout = d }
