package store

// The default names, each defined here once; the public packages' exported
// defaults (outboxhook.DefaultTable, relay.DefaultChannel, ...) refer to
// these.
const (
	// DefaultOutbox is the outbox table's default name, the one the
	// migration files use: a table configured under another name gets the
	// same statements with its names put in (migrate.Render).
	DefaultOutbox = "outbox_messages"
	// DefaultInbox is the inbox table's default name, the one the migration
	// files use.
	DefaultInbox = "inbox_messages"
	// DefaultChannel is the default PostgreSQL LISTEN/NOTIFY channel that
	// wakes the relays.
	DefaultChannel = "herald_outbox"
	// MigrationsTable is the table migrate.Migrate records applied versions
	// in.
	MigrationsTable = "herald_schema_migrations"
	// DefaultWALPrefix is the default prefix of the log's messages that
	// hold the events of the outbox kept in the WAL: what the outbox hook
	// writes (outboxhook.DefaultWALPrefix) and the WAL relay streams.
	DefaultWALPrefix = "herald"
	// WALSlotsTable is the table, beside the outbox table, where the WAL
	// relay records its slots (WAL.SlotRecords; walrelay.SlotMarkerTable).
	WALSlotsTable = "herald_wal_slots"
	// FleetTable names the fleet's members: a fleet.Fleet with a control
	// database beats in its instance table (Heartbeats: herald_fleet_relays)
	// and reads the live members from it.
	FleetTable = "herald_fleet"
)
