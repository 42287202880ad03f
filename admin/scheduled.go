package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/store"
)

// ScheduledFigures are the figures of the scheduled events (events.Schedule,
// outboxhook.Schedule): events saved to be published later, by the
// database's clock.
type ScheduledFigures struct {
	// Count counts the scheduled events neither published nor dead, due or
	// not (they are pending events too: Figures.Pending counts them).
	Count int64 `json:"count"`
	// NextDueSeconds is how long until the earliest scheduled event that is
	// not due yet comes due, in seconds; 0 when none waits.
	NextDueSeconds float64 `json:"next_due_seconds"`
	// OverdueSeconds is how long ago the earliest scheduled event that is
	// due and not published yet came due, in seconds; 0 when none is. It
	// stays below a relay's PollInterval while relays keep up: growing, the
	// event fails (see the failing events) or no relay publishes.
	OverdueSeconds float64 `json:"overdue_seconds"`
}

// NextDue is NextDueSeconds as a duration.
func (f ScheduledFigures) NextDue() time.Duration { return seconds(f.NextDueSeconds) }

// Overdue is OverdueSeconds as a duration.
func (f ScheduledFigures) Overdue() time.Duration { return seconds(f.OverdueSeconds) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// scheduledFigures reads the scheduled events' figures (the relay's Stats).
func (o *Outbox) scheduledFigures(ctx context.Context) (ScheduledFigures, error) {
	st, err := o.rel.Stats(ctx, o.db)
	if err != nil {
		return ScheduledFigures{}, fmt.Errorf("admin: scheduled figures: %w", err)
	}
	return ScheduledFigures{Count: st.Scheduled, NextDueSeconds: st.NextScheduled.Seconds(), OverdueSeconds: st.Overdue.Seconds()}, nil
}

// ScheduledFilter picks scheduled events that are neither published nor
// dead. The zero filter picks them all, due or not.
type ScheduledFilter struct {
	// Overdue: only those already due (by the database's clock) and not
	// published yet. Defaults to false: due or not.
	Overdue bool
}

// ScheduledEvent is a scheduled event neither published nor dead: waiting
// for its due time or, once due, for a relay to publish it.
type ScheduledEvent struct {
	ID            string    `json:"id"`
	Type          string    `json:"type"`
	Version       int       `json:"version"`
	Topic         string    `json:"topic"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	OccurredAt    time.Time `json:"occurred_at"`
	// Key is the key it was scheduled under (events.Schedule.Key); "" for
	// none.
	Key string `json:"key"`
	// DueAt is when it comes (or came) due, by the database's clock (UTC).
	DueAt time.Time `json:"due_at"`
	// Attempts and LastError are those of an event that came due and
	// failed to publish (0 and "" otherwise).
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
}

// Aggregate is "type id", or "" for an event of no aggregate.
func (e ScheduledEvent) Aggregate() string {
	return strings.TrimSpace(e.AggregateType + " " + e.AggregateID)
}

// Scheduled lists up to limit scheduled events f picks, soonest due first,
// without their payloads and metadata.
func (o *Outbox) Scheduled(ctx context.Context, f ScheduledFilter, limit int) ([]ScheduledEvent, error) {
	rows, err := o.adm.FindScheduled(ctx, o.db, store.ScheduledParams{Limit: limit, Overdue: f.Overdue})
	if err != nil {
		return nil, fmt.Errorf("admin: list scheduled: %w", err)
	}
	out := make([]ScheduledEvent, len(rows))
	for i, r := range rows {
		out[i] = ScheduledEvent{ID: r.ID, Type: r.Type, Version: r.Version, Topic: r.Topic, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, OccurredAt: r.OccurredAt.UTC(), Key: r.Schedule.Key, DueAt: r.Schedule.At.UTC(),
			Attempts: r.Attempts, LastError: r.LastError}
	}
	return out, nil
}

// ScheduleOutcome is what became of a scheduled event that CancelScheduled
// or PublishNow was asked to change. Only an event not due yet (by the
// database's clock) can be changed; the other outcomes say why it was not.
type ScheduleOutcome string

const (
	// ScheduleCancelled: the event was deleted; it will never be published.
	ScheduleCancelled ScheduleOutcome = "cancelled"
	// ScheduleMadeDue: the event is due now; the relays publish it (they
	// were woken).
	ScheduleMadeDue ScheduleOutcome = "made_due"
	// ScheduleDue: the event is due already and not published yet (a relay
	// is publishing it, or it failed and waits for a retry): too late to
	// change it.
	ScheduleDue ScheduleOutcome = "due"
	// SchedulePublished: the event was published already.
	SchedulePublished ScheduleOutcome = "published"
	// ScheduleDead: the event came due, failed and went dead (see the dead
	// events).
	ScheduleDead ScheduleOutcome = "dead"
	// ScheduleNotFound: no scheduled event has this id: it was cancelled,
	// published and deleted (a relay without a Retention deletes what it
	// publishes), saved unscheduled, or never saved.
	ScheduleNotFound ScheduleOutcome = "not_found"
)

// Changed reports whether the event was cancelled or made due.
func (s ScheduleOutcome) Changed() bool { return s == ScheduleCancelled || s == ScheduleMadeDue }

// sentence says what became of the scheduled event id, for the page; "" for
// an outcome it does not know.
func (s ScheduleOutcome) sentence(id string) string {
	switch s {
	case ScheduleCancelled:
		return "Cancelled scheduled event " + id + ": it will not be published."
	case ScheduleMadeDue:
		return "Scheduled event " + id + " is due now: the relays publish it."
	case ScheduleDue:
		return "Scheduled event " + id + " is due already (being published, or waiting for a retry): too late to change it."
	case SchedulePublished:
		return "Scheduled event " + id + " was published already: nothing changed."
	case ScheduleDead:
		return "Scheduled event " + id + " came due and went dead: nothing changed (requeue it among the dead events)."
	case ScheduleNotFound:
		return "No scheduled event " + id + " (cancelled, or published and deleted, or never scheduled): nothing changed."
	}
	return ""
}

// CancelScheduled cancels the scheduled event id, in a transaction of its
// own, if it is not due yet by the database's clock: it is deleted and never
// published (ScheduleCancelled). Otherwise it changes nothing and says what
// became of the event. A cancel waits for a relay that holds the event, and
// then finds it published. The error is only for a failure to ask.
func (o *Outbox) CancelScheduled(ctx context.Context, id uuid.UUID) (ScheduleOutcome, error) {
	out, err := o.reschedule(ctx, store.RescheduleParams{ID: id.String(), Cancel: true}, ScheduleCancelled)
	if err != nil {
		return "", fmt.Errorf("admin: cancel scheduled event %s: %w", id, err)
	}
	return out, nil
}

// PublishNow makes the scheduled event id due now, in a transaction of its
// own, if it is not due yet by the database's clock (ScheduleMadeDue), and
// wakes the relays (Config.Wake, and on PostgreSQL a NOTIFY on
// Config.Channel). Its metadata's due time (events.MetaDueAt) becomes now.
// Otherwise it changes nothing and says what became of the event.
func (o *Outbox) PublishNow(ctx context.Context, id uuid.UUID) (ScheduleOutcome, error) {
	out, err := o.reschedule(ctx, store.RescheduleParams{ID: id.String()}, ScheduleMadeDue)
	if err != nil {
		return "", fmt.Errorf("admin: publish scheduled event %s now: %w", id, err)
	}
	if out == ScheduleMadeDue {
		o.wake(ctx)
	}
	return out, nil
}

// reschedule runs p in a transaction of its own and returns changed when it
// changed the event, else what it found.
func (o *Outbox) reschedule(ctx context.Context, p store.RescheduleParams, changed ScheduleOutcome) (ScheduleOutcome, error) {
	tx, err := o.db.BeginTx(ctx, o.drv.LockingTx())
	if err != nil {
		return "", err
	}
	res, err := o.out.Reschedule(ctx, tx, p)
	if err != nil {
		_ = tx.Rollback()
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", err
	}
	switch {
	case res.Changed > 0:
		return changed, nil
	case res.Published > 0:
		return SchedulePublished, nil
	case res.Dead > 0:
		return ScheduleDead, nil
	case res.Due > 0:
		return ScheduleDue, nil
	}
	return ScheduleNotFound, nil
}
