package store

// The default names, each defined here once; the public packages' exported
// defaults (outboxhook.DefaultTable, relay.DefaultChannel, ...) refer to
// these.
const (
	// DefaultOutbox is the outbox table's default name, the one the
	// migration files use: a table configured under another name gets the
	// same statements with its names put in (Render).
	DefaultOutbox = "outbox_messages"
	// DefaultInbox is the inbox table's default name, the one the migration
	// files use.
	DefaultInbox = "inbox_messages"
	// DefaultChannel is the default PostgreSQL LISTEN/NOTIFY channel that
	// wakes the relays.
	DefaultChannel = "herald_outbox"
	// MigrationsTable is the table Migrate records applied versions in.
	MigrationsTable = "herald_schema_migrations"
)
