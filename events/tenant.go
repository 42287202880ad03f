package events

// MetaTenant is the metadata key of the tenant an event was relayed for: a
// relay given a tenant (relay.Config.Tenant, set by a fleet.Fleet for each of
// its tenants) adds it to every message it publishes, so that a consumer can
// route by it (the inbox's transaction on the tenant's own database, say).
// Absent from the messages of a relay without one.
const MetaTenant = "herald_tenant"
