package testkit

import (
	"context"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/outboxhook"
)

// AddEvents writes evs through outboxhook.Add on db with ctx (the plugin
// registered) and returns their ids, in order.
func AddEvents(t tb.TB, ctx context.Context, db *gorm.DB, evs ...events.Event) []uuid.UUID {
	t.Helper()
	return written(t, db, func() error { return outboxhook.Add(db.WithContext(ctx), evs...) })
}

// ScheduleEvents writes evs scheduled by s through outboxhook.Schedule on db
// (the plugin registered) and returns their ids, in order.
func ScheduleEvents(t tb.TB, db *gorm.DB, s events.Schedule, evs ...events.Event) []uuid.UUID {
	t.Helper()
	return written(t, db, func() error { return outboxhook.Schedule(db, s, evs...) })
}

// written runs write and returns the ids of the outbox rows it added, in
// order.
func written(t tb.TB, db *gorm.DB, write func() error) []uuid.UUID {
	t.Helper()
	before := len(Outbox(t, db))
	Must(t, write())
	var ids []uuid.UUID
	for _, r := range Outbox(t, db)[before:] {
		ids = append(ids, r.ID)
	}
	return ids
}

// Ago returns the SQL of the database's time dur ago, and its argument (the
// dialect's SQL).
func (d Dialect) Ago(dur time.Duration) (string, any) { return d.SQL.Ago(dur) }

// KillEvent makes event id of outbox_messages dead since ago (by the
// database's clock), after 12 attempts and 11 strikes that ended in lastErr.
func (d Dialect) KillEvent(t tb.TB, db *gorm.DB, id uuid.UUID, ago time.Duration, lastErr string) {
	t.Helper()
	at, arg := d.Ago(ago)
	Must(t, db.Exec(`UPDATE outbox_messages SET dead_at = `+at+`, attempts = 12, strikes = 11, last_error = ? WHERE id = ?`,
		arg, lastErr, id.String()).Error)
}

// StampEvent sets column (created_at, processed_at, ...) of event id of
// outbox_messages to ago before the database's now.
func (d Dialect) StampEvent(t tb.TB, db *gorm.DB, id uuid.UUID, column string, ago time.Duration) {
	t.Helper()
	at, arg := d.Ago(ago)
	Must(t, db.Exec(`UPDATE outbox_messages SET `+column+` = `+at+` WHERE id = ?`, arg, id.String()).Error)
}

// FailEvent records a failed attempt ("timeout") of the pending event id of
// outbox_messages.
func FailEvent(t tb.TB, db *gorm.DB, id uuid.UUID) {
	t.Helper()
	Must(t, db.Exec(`UPDATE outbox_messages SET attempts = attempts + 1, last_error = 'timeout' WHERE id = ?`, id.String()).Error)
}
