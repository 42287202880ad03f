package outboxhook

import "errors"

// Errors a save returns, wrapped, when its events cannot be written. In each case
// the statement fails and its transaction is rolled back (or, in a transaction the
// caller opened, left unable to commit): no business row is kept without its events.
var (
	// ErrEncode wraps the codec's error for an event that cannot be encoded
	// (a channel or function field, a NaN float, ...).
	ErrEncode = errors.New("outboxhook: cannot encode event")
	// ErrPayloadTooLarge is returned for a payload over Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("outboxhook: payload too large")
	// ErrEmptyAggregateID is returned when an aggregate has no id at write time.
	ErrEmptyAggregateID = errors.New("outboxhook: aggregate id is empty")
	// ErrTableMissing is returned when the outbox table does not exist and
	// Config.DisableAutoCreate is set.
	ErrTableMissing = errors.New("outboxhook: outbox table does not exist")
	// ErrNotRegistered is returned by [Add] on a *gorm.DB without the plugin.
	ErrNotRegistered = errors.New("outboxhook: plugin not registered on this *gorm.DB (db.Use(outboxhook.New(...)))")
)
