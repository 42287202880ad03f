// Package admin is for the people on call: an http.Handler a service mounts to
// see what its outbox holds, to requeue dead events and to cancel scheduled
// events or publish them now, and the operations behind it (Outbox), which
// the herald command runs too.
//
//	h, err := admin.New(db, admin.Config{AllowWrites: true, Wake: r.Wake})
//	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", requireOperator(h)))
//
// The page is rendered on the server with html/template, with no JavaScript,
// and fits a window 800 px wide and up; what it shows from the database has
// its control characters escaped as the herald command prints them
// (Printable: an ESC byte is shown as \x1b):
// the figures per topic (pending, failing, dead, age of the oldest pending
// event, events published in the last minute when a retention keeps them),
// the scheduled events (events.Schedule: how many wait, when the next comes
// due, how long the earliest due one has waited unpublished, and the events
// themselves, soonest due first, with their keys and due times), the failing
// events (pending, their publish failed at least once) grouped
// by type and last error with their attempts and next attempt, the dead
// events with their last errors (whole, wrapped), whether relays are alive
// (Outbox.Relays: each relay instance with its last heartbeat and, in ordered
// mode, its partition leases, and the due backlog; "no relay seen for X" in
// red when events are due and none is alive), the dead events grouped by
// cause (Outbox.DeadGroups: type and last error with numbers, ids and
// addresses stripped, NormalizeError), and, when Config.AllowWrites is set, a
// requeue button per dead event and a requeue-all button, requeue, purge and
// dry-run buttons per dead group (recorded in the audit trail, Outbox.Audit,
// with Config.Actor's name), and a publish-now and a cancel button per
// scheduled event not due yet. With
// Config.WALSlot (events kept in the WAL, outboxhook.StorageWAL, published
// by walrelay) it shows the relay's replication slot too: whether it exists
// and a relay streams it, its wal_status, its lag and the WAL it holds back
// (walrelay.SlotStatus); the outbox table may then be missing. With
// Config.Fleet (a *fleet.Fleet, relaying many tenants' outboxes) the page
// counts the fleet's tenants by state and links to a tenants page: each
// tenant this process serves with its state, error, failures and outbox
// figures (pending, failing, dead, age of the oldest pending event,
// scheduled), the worst first (failing, then by that age, then by backlog),
// failing rows highlighted, then the tenants other members serve, up to
// Config.TenantLimit; figures not read within Config.TenantTimeout leave the
// states alone listed. Its routes,
// relative to where it is mounted (it links relatively, so any prefix works
// through http.StripPrefix):
//
//	GET  /                  the page
//	GET  /dead/{id}         one dead event, with its payload and metadata
//	GET  /api/status        the page's data as JSON (Report)
//	GET  /api/dead/{id}     one dead event as JSON (DeadEvent)
//	GET  /tenants           the fleet's tenants (Config.Fleet; 404 without it)
//	GET  /api/tenants       the fleet's tenants as JSON (TenantsReport)
//	POST /requeue           requeue the dead events named by the form's id fields
//	POST /requeue-all       requeue every dead event
//	POST /requeue-group     requeue the dead group the form's key names (dry_run=1: count only)
//	POST /purge-group       purge the dead group the form's key names (older_than: keep the younger; dry_run=1)
//	POST /publish-now       make the scheduled event the form's id names due now
//	POST /cancel-scheduled  cancel the scheduled event the form's id names
//
// The handler does no authentication: mount it behind the service's own.
//
// # Writes
//
// The handler is read-only unless Config.AllowWrites is set: without it the
// page shows no buttons and a POST is refused with 403 Forbidden. The POST
// routes answer a form with a redirect (303) to the page, which says what was
// done, and a request that accepts application/json with JSON. Only a
// scheduled event not due yet (by the database's clock) can be cancelled or
// published now: for one due, published or dead already, or unknown, the page
// says so and changes nothing (JSON: 409, or 404 for an unknown id, with the
// ScheduleOutcome).
//
// # Cross-site request forgery
//
// POSTs go through the standard library's http.CrossOriginProtection (Go
// 1.25): a browser tells the server where a request comes from (the
// Sec-Fetch-Site header, or failing that Origin, compared with Host), and a
// POST from another origin is refused with 403 Forbidden. It needs no token,
// no cookie and no session, so the handler stays stateless and works behind
// any prefix and any authentication; a request with neither header does not
// come from a browser, so it cannot carry a victim's credentials and is let
// through. Origins that may POST besides the page's own (a console on another
// host) are listed in Config.TrustedOrigins. The page also forbids framing
// (clickjacking) and runs no script (Content-Security-Policy).
package admin
