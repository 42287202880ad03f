// Package fleet relays the outboxes of many tenants, a database or a schema
// each, from one process or several, at a cost that grows with their work
// rather than with their number.
//
// A relay.Relay per tenant would hold a pool, a poll loop and (PostgreSQL) a
// LISTEN connection each: a thousand tenants, thousands of connections and
// a thousand polls a second, mostly of empty tables. A Fleet keeps one
// budget of connections (Config.MaxConns) for them all and runs a tenant's
// relay only while it has work:
//
//   - An idle tenant costs one probe statement now and then ("when is the
//     earliest pending event due?"), on one connection of the budget. Its
//     probes grow apart while it stays idle, from Config.MinProbe (the
//     relay's PollInterval) to Config.MaxProbe (10s), and come at an
//     earlier due time of a scheduled event. Wake relays a tenant at once:
//     call it from the writers' process (outboxhook.Config.Notify); on
//     PostgreSQL, writers in other processes notify the tenant
//     (relay.Notifier.Tenant) where the fleet listens (Config.Listen). A
//     tenant opened through Tenant.Open holds no connection while idle, and
//     its pool is closed after Config.IdleClose.
//   - A tenant with work gets a relay.Relay of Config.Relay (ordered mode,
//     retries, dead-lettering, retention, scheduled events and fencing as
//     for one outbox), on Config.ConnsPerTenant connections, until a batch
//     comes back short. Every message carries its tenant in its metadata
//     (events.MetaTenant). While other tenants wait for a place, a tenant
//     keeps its place for Config.Slice, then finishes its batch and queues
//     behind them: a backlog of a million events delays another tenant's new
//     event by about a Slice per tenant ahead of it, not by the backlog.
//   - A tenant whose database is down, whose table was dropped or whose
//     grants were revoked fails alone: Status shows it failing with its
//     error, it is tried again after a wait that doubles up to
//     Config.MaxBackoff, and every other tenant goes on.
//
// Several fleet processes share the tenants through a control database
// (Config.Members): each beats in a table there and serves the tenants that
// hash to it among the live members (rendezvous hashing), so that a member
// joining, leaving or dying moves only its share, within Config.MemberTTL. A
// tenant served by two members for a moment is safe: its relays claim with
// row locks and, ordered, partition leases, as any two relays of one outbox
// do.
//
// Tenants are given by a function (Config.Tenants), called again every
// Config.RefreshInterval: tenants added or removed while the fleet runs start
// and stop without a restart. docs/tenants.md explains the tenancy models
// (a database per tenant, a schema per tenant, a shared table) and the inbox
// on the consumer side.
package fleet
