package fleet

// PrefetchedChecks is how many tenant relays' first runs checked their
// schema from the catalog read made at their shared pool's probe.
func PrefetchedChecks(f *Fleet) int64 { return f.prefetchedChecks.Load() }
