package outboxhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/recorded"
	"github.com/heraldgo/herald/internal/store"
)

// Errors of [Cancel] and [Move] for an event they could not change. Each
// says what happened to it instead.
var (
	// ErrPublished: the event was published; it cannot be unpublished.
	ErrPublished = errors.New("outboxhook: scheduled event already published")
	// ErrDue: the event is due and not published yet: a relay is
	// publishing it, or it failed and waits for a retry. It is too late to
	// change it; it will be published (or dead-lettered).
	ErrDue = errors.New("outboxhook: scheduled event already due")
	// ErrDead: the event came due, failed and was dead-lettered.
	ErrDead = errors.New("outboxhook: scheduled event dead-lettered")
	// ErrNotScheduled: no scheduled event has this id: it was never saved
	// (or its transaction rolled back), was saved unscheduled, was cancelled,
	// or was published and then deleted (a relay without retention deletes
	// what it publishes).
	ErrNotScheduled = errors.New("outboxhook: no scheduled event with this id")
)

// Schedule writes events that belong to no aggregate to the outbox, through
// tx, as [Add] does, to be published when s says: not before s.At, or s.After
// past the save, by the database's clock. Each event's metadata carries its
// due time (events.MetaDueAt). It fails with [ErrScheduledWAL] under
// StorageWAL, and with Add's errors. Aggregates schedule their own events
// with aggregate.Root.Schedule.
func Schedule(tx *gorm.DB, s events.Schedule, evs ...events.Event) error {
	return add(tx, s, evs)
}

// Rescheduled is what [CancelKey] and [MoveKey] did with the scheduled events
// of a key: Changed were cancelled or moved (they were not due yet); the
// others could not be: Due (being published, or waiting for a retry),
// Published, Dead. Events of the key published and deleted since are in none.
type Rescheduled struct {
	Changed, Due, Published, Dead int64
}

// Cancel cancels the scheduled event id in tx's transaction: the event is
// deleted from the outbox and never published, if the transaction commits.
// It can be cancelled until it is due by the database's clock: afterwards it
// returns [ErrDue], [ErrPublished] or [ErrDead] for what became of it, and
// [ErrNotScheduled] for an id it does not know. A cancel waits for a relay
// that holds the event (it then finds it published). The id is the record's
// (aggregate.Root.Records) or the Watermill message's.
func Cancel(tx *gorm.DB, id uuid.UUID) error {
	res, err := reschedule(tx, store.RescheduleParams{ID: id.String(), Cancel: true})
	if err != nil {
		return fmt.Errorf("outboxhook: cancel %s: %w", id, err)
	}
	return outcome(res, id)
}

// Move moves the scheduled event id to come due when to says (the zero
// Schedule: now), in tx's transaction, until it is due; its metadata's due
// time follows. Its errors are [Cancel]'s; to's Key and Apart are ignored.
func Move(tx *gorm.DB, id uuid.UUID, to events.Schedule) error {
	res, err := reschedule(tx, store.RescheduleParams{ID: id.String(), To: storeSchedule(to)})
	if err != nil {
		return fmt.Errorf("outboxhook: move %s: %w", id, err)
	}
	return outcome(res, id)
}

// CancelKey cancels, in tx's transaction, every scheduled event saved under
// key that is not due yet, and counts the others.
func CancelKey(tx *gorm.DB, key string) (Rescheduled, error) {
	res, err := reschedule(tx, store.RescheduleParams{Key: key, Cancel: true})
	if err != nil {
		return Rescheduled{}, fmt.Errorf("outboxhook: cancel key %q: %w", key, err)
	}
	return Rescheduled(res), nil
}

// MoveKey moves, in tx's transaction, every scheduled event saved under key
// that is not due yet to come due when to says (the zero Schedule: now), and
// counts the others.
func MoveKey(tx *gorm.DB, key string, to events.Schedule) (Rescheduled, error) {
	res, err := reschedule(tx, store.RescheduleParams{Key: key, To: storeSchedule(to)})
	if err != nil {
		return Rescheduled{}, fmt.Errorf("outboxhook: move key %q: %w", key, err)
	}
	return Rescheduled(res), nil
}

// reschedule runs p through tx and wakes the relay when it committed a move
// (an event moved to now is due at the commit).
func reschedule(tx *gorm.DB, p store.RescheduleParams) (store.RescheduleResult, error) {
	pl, ok := tx.Config.Plugins[Name].(*Plugin)
	if !ok {
		return store.RescheduleResult{}, ErrNotRegistered
	}
	if tx.Error != nil {
		return store.RescheduleResult{}, tx.Error
	}
	if p.Key == "" && p.ID == "" {
		return store.RescheduleResult{}, nil
	}
	if pl.cfg.Storage == StorageWAL {
		return store.RescheduleResult{}, ErrScheduledWAL
	}
	st := tx.Statement
	res, err := pl.out.Reschedule(st.Context, st.ConnPool, p)
	if err != nil {
		if errors.Is(err, store.ErrTableMissing) {
			return res, fmt.Errorf("%w: %s: %w", ErrTableMissing, pl.cfg.Table, err)
		}
		return res, err
	}
	if res.Changed > 0 && !p.Cancel {
		if t := txnOf(st.ConnPool); t != nil {
			t.wrote(nil, true)
		} else {
			pl.notify()
		}
	}
	return res, nil
}

type requireKey struct{}

// RequireRescheduled returns a context under which a save fails when a
// cancel or move recorded on one of its aggregates (aggregate.Root.Cancel,
// CancelKey, Move, MoveKey) changes no scheduled event: the error wraps
// [ErrPublished], [ErrDead], [ErrDue] or [ErrNotScheduled] for what it found
// (for a key: what it found of its events, in that order of precedence),
// and the save's transaction rolls back (or, in a transaction the caller
// opened, cannot commit); the aggregate keeps its events, cancels and moves
// pending. Without it (the default) such a change does not fail the save:
// aggregate.Root.Rescheduled tells what it found, after the commit.
func RequireRescheduled(ctx context.Context) context.Context {
	return context.WithValue(ctx, requireKey{}, true)
}

func requireRescheduled(ctx context.Context) bool {
	v, _ := ctx.Value(requireKey{}).(bool)
	return v
}

// checkChanges refuses the cancels and moves among entries under
// StorageWAL, before anything is written.
func (p *Plugin) checkChanges(entries []*recorded.Entry) error {
	if p.cfg.Storage != StorageWAL {
		return nil
	}
	for _, e := range entries {
		if e.Change != nil {
			return fmt.Errorf("%w: %s", ErrScheduledWAL, describe(e.Change))
		}
	}
	return nil
}

// apply applies the cancel or move e recorded on an aggregate in the
// statement's transaction and notes what it found on e. With strict, a
// change that changed nothing is an error.
func (p *Plugin) apply(db *gorm.DB, e *recorded.Entry, strict bool) error {
	c := e.Change
	params := store.RescheduleParams{Key: c.Key, Cancel: c.Cancel}
	if c.ID != uuid.Nil {
		params.ID = c.ID.String()
	}
	if !c.Cancel {
		params.To = storeSchedule(c.To)
	}
	res, err := reschedule(db, params)
	if err != nil {
		return fmt.Errorf("outboxhook: %s: %w", describe(c), err)
	}
	c.Changed, c.Due, c.Published, c.Dead = res.Changed, res.Due, res.Published, res.Dead
	if strict && res.Changed == 0 {
		return fmt.Errorf("outboxhook: %s: %w", describe(c), foundInstead(res))
	}
	return nil
}

// describe names a change recorded on an aggregate, for errors.
func describe(c *recorded.Change) string {
	verb := "move"
	if c.Cancel {
		verb = "cancel"
	}
	if c.Key != "" {
		return fmt.Sprintf("%s key %q", verb, c.Key)
	}
	return fmt.Sprintf("%s %s", verb, c.ID)
}

// foundInstead is the error for what a change that changed nothing found.
func foundInstead(res store.RescheduleResult) error {
	switch {
	case res.Published > 0:
		return ErrPublished
	case res.Dead > 0:
		return ErrDead
	case res.Due > 0:
		return ErrDue
	}
	return ErrNotScheduled
}

// outcome is the error of a Cancel or Move of one event by what it found.
func outcome(res store.RescheduleResult, id uuid.UUID) error {
	switch {
	case res.Changed > 0:
		return nil
	case res.Published > 0:
		return fmt.Errorf("%w: %s", ErrPublished, id)
	case res.Dead > 0:
		return fmt.Errorf("%w: %s", ErrDead, id)
	case res.Due > 0:
		return fmt.Errorf("%w: %s", ErrDue, id)
	}
	return fmt.Errorf("%w: %s", ErrNotScheduled, id)
}

// storeSchedule is the store's form of s (its Apart is the write path's).
func storeSchedule(s events.Schedule) store.Schedule {
	return store.Schedule{At: s.At, After: s.After, Key: s.Key}
}
