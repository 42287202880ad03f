package admin

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// ErrTableMissing is returned (wrapped) by Open when the outbox table does
// not exist.
var ErrTableMissing = errors.New("table does not exist")

// ErrNotDead is returned (wrapped) for an id that is not a dead event: it
// never was, or it was requeued or purged since.
var ErrNotDead = errors.New("no dead event with that id")

// purgeBatch is how many dead events one statement of PurgeDead deletes.
const purgeBatch = 1000

// Outbox is the operations the people on call run on one outbox table: what
// the admin page shows and does, and what the herald command runs. It is safe
// for concurrent use.
type Outbox struct {
	cfg   Config
	db    *sql.DB
	drv   store.Driver
	adm   store.Admin
	table ident.Table
	log   *slog.Logger
}

// Open returns the operations on the outbox table cfg.Table of db (cfg's
// other fields that concern them: MaxAge, Wake, Channel, Logger). It fails
// with ErrTableMissing when the table does not exist.
func Open(ctx context.Context, db *gorm.DB, cfg Config) (*Outbox, error) {
	o, err := newOutbox(db, cfg)
	if err != nil {
		return nil, err
	}
	ok, err := o.drv.Outbox(o.table).Exists(ctx, o.db)
	if err != nil {
		return nil, fmt.Errorf("admin: look up table %s: %w", o.table, err)
	}
	if !ok {
		return nil, fmt.Errorf("admin: %w: %s", ErrTableMissing, o.table)
	}
	return o, nil
}

func newOutbox(db *gorm.DB, cfg Config) (*Outbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if db == nil {
		return nil, errors.New("admin: db is required")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	drv, err := drivers.For(db)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	table := ident.MustTable(cfg.Table) // checked by Validate
	return &Outbox{
		cfg:   cfg,
		db:    sqlDB,
		drv:   drv,
		adm:   drv.Admin(table),
		table: table,
		log:   cfg.Logger.With("component", "herald.admin", "table", table.String()),
	}, nil
}

// Table is the outbox table, as configured.
func (o *Outbox) Table() string { return o.table.String() }

// Database is the dialect: "postgres", "sqlite" or "mysql".
func (o *Outbox) Database() string { return o.drv.Name() }

// Figures are the counts of one topic, or of the whole outbox.
type Figures struct {
	// Topic is the topic; empty in Status.Total.
	Topic string `json:"topic,omitempty"`
	// Pending counts the events not yet published and not dead.
	Pending int64 `json:"pending"`
	// Failing counts the pending events whose publish failed at least once.
	Failing int64 `json:"failing"`
	// Dead counts the dead events, waiting to be requeued.
	Dead int64 `json:"dead"`
	// OldestPendingSeconds is the age of the oldest pending event (since its
	// insert, by the database's clock) in seconds; 0 when none is pending.
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// PublishedLastMinute counts the events published within the last
	// minute, when the table keeps published events (a relay Retention);
	// nil otherwise, when it cannot be told.
	PublishedLastMinute *int64 `json:"published_last_minute"`
}

// OldestPending is OldestPendingSeconds as a duration.
func (f Figures) OldestPending() time.Duration {
	return time.Duration(f.OldestPendingSeconds * float64(time.Second))
}

// Status is what the outbox holds, per topic and in total, and whether that is
// healthy.
type Status struct {
	// Table and Database name the outbox table and its dialect.
	Table    string `json:"table"`
	Database string `json:"database"`
	// At is when the figures were read (this process's clock, UTC).
	At time.Time `json:"at"`
	// RetainsPublished tells whether the table keeps published events (a
	// relay Retention), so that PublishedLastMinute counts them.
	RetainsPublished bool `json:"retains_published"`
	// Total sums the topics (its OldestPendingSeconds is the largest).
	Total Figures `json:"total"`
	// Topics are the figures of each topic with pending or dead events, or
	// with events published within the last minute, by topic name.
	Topics []Figures `json:"topics"`
	// Healthy is true when there is no problem.
	Healthy bool `json:"healthy"`
	// Problems say what is unhealthy: dead events, and an oldest pending
	// event older than Config.MaxAge. Empty when healthy.
	Problems []string `json:"problems"`
}

// Status reads the figures per topic, sums them and judges them: dead events,
// or a pending event older than Config.MaxAge, are problems.
func (o *Outbox) Status(ctx context.Context) (Status, error) {
	topics, err := o.adm.Topics(ctx, o.db)
	if err != nil {
		return Status{}, fmt.Errorf("admin: status: %w", err)
	}
	retains, err := o.adm.RetainsPublished(ctx, o.db)
	if err != nil {
		return Status{}, fmt.Errorf("admin: status: %w", err)
	}
	s := Status{Table: o.table.String(), Database: o.drv.Name(), At: time.Now().UTC(), RetainsPublished: retains,
		Topics: make([]Figures, 0, len(topics)), Problems: []string{}}
	var published int64
	for _, t := range topics {
		f := Figures{Topic: t.Topic, Pending: t.Pending, Failing: t.Failing, Dead: t.Dead, OldestPendingSeconds: t.OldestPending.Seconds()}
		if retains {
			f.PublishedLastMinute = &t.PublishedLastMinute
			published += t.PublishedLastMinute
		}
		s.Topics = append(s.Topics, f)
		s.Total.Pending += f.Pending
		s.Total.Failing += f.Failing
		s.Total.Dead += f.Dead
		s.Total.OldestPendingSeconds = max(s.Total.OldestPendingSeconds, f.OldestPendingSeconds)
	}
	if retains {
		s.Total.PublishedLastMinute = &published
	}
	if s.Total.Dead > 0 {
		s.Problems = append(s.Problems, plural(s.Total.Dead, "dead event"))
	}
	if age := s.Total.OldestPending(); o.cfg.MaxAge > 0 && age > o.cfg.MaxAge {
		s.Problems = append(s.Problems, fmt.Sprintf("the oldest pending event is %s old, over %s", Age(age), o.cfg.MaxAge))
	}
	s.Healthy = len(s.Problems) == 0
	return s, nil
}

// plural returns "1 thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// Age formats an age for people: to the second ("3m12s"), to the millisecond
// below a second, "0s" for none.
func Age(d time.Duration) string {
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// DeadEvent is a dead event: its envelope, its failed attempts and strikes
// (failures confirmed by a later publish, see relay.Config.MaxAttempts), the
// last error and when it died.
type DeadEvent struct {
	ID            string    `json:"id"`
	Type          string    `json:"type"`
	Version       int       `json:"version"`
	Topic         string    `json:"topic"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	OccurredAt    time.Time `json:"occurred_at"`
	Attempts      int       `json:"attempts"`
	Strikes       int       `json:"strikes"`
	LastError     string    `json:"last_error"`
	DeadAt        time.Time `json:"dead_at"`
	// Payload and Metadata are the stored JSON (a JSON string holding the
	// stored text, should it not be JSON). Lists leave them out; DeadEvent
	// (one event) has them.
	Payload  json.RawMessage `json:"payload,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Aggregate is "type id", or "" for an event of no aggregate.
func (e DeadEvent) Aggregate() string {
	return strings.TrimSpace(e.AggregateType + " " + e.AggregateID)
}

func deadEvent(d store.DeadRow, withBody bool) DeadEvent {
	e := DeadEvent{ID: d.ID, Type: d.Type, Version: d.Version, Topic: d.Topic, AggregateType: d.AggregateType, AggregateID: d.AggregateID,
		OccurredAt: d.OccurredAt.UTC(), Attempts: d.Attempts, Strikes: d.Strikes, LastError: d.LastError, DeadAt: d.DeadAt.UTC()}
	if withBody {
		e.Payload, e.Metadata = rawJSON(d.Payload), rawJSON(d.Metadata)
	}
	return e
}

// rawJSON returns b compacted when it is JSON (the databases store it with
// different spacing), else b as a JSON string.
func rawJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return buf.Bytes()
	}
	s, _ := json.Marshal(string(b))
	return s
}

// DeadFilter picks dead events; its conditions are ANDed, and the zero filter
// picks them all.
type DeadFilter struct {
	// IDs: only these events, when not empty.
	IDs []uuid.UUID
	// Type: only events of this type, when not empty.
	Type string
	// OlderThan: only events that died more than this long ago (by the
	// database's clock), when > 0.
	OlderThan time.Duration
}

func (f DeadFilter) store() store.DeadFilter {
	sf := store.DeadFilter{Type: f.Type, OlderThan: f.OlderThan}
	for _, id := range f.IDs {
		sf.IDs = append(sf.IDs, id.String())
	}
	return sf
}

// Dead lists up to limit dead events f picks, oldest death first, without
// their payloads and metadata.
func (o *Outbox) Dead(ctx context.Context, f DeadFilter, limit int) ([]DeadEvent, error) {
	rows, err := o.adm.FindDead(ctx, o.db, f.store(), limit)
	if err != nil {
		return nil, fmt.Errorf("admin: list dead: %w", err)
	}
	out := make([]DeadEvent, len(rows))
	for i, d := range rows {
		out[i] = deadEvent(d, false)
	}
	return out, nil
}

// DeadEvent returns the dead event id with its payload and metadata, or an
// error wrapping ErrNotDead.
func (o *Outbox) DeadEvent(ctx context.Context, id uuid.UUID) (DeadEvent, error) {
	rows, err := o.adm.FindDead(ctx, o.db, store.DeadFilter{IDs: []string{id.String()}}, 1)
	if err != nil {
		return DeadEvent{}, fmt.Errorf("admin: read dead event %s: %w", id, err)
	}
	if len(rows) == 0 {
		return DeadEvent{}, fmt.Errorf("admin: %w: %s", ErrNotDead, id)
	}
	return deadEvent(rows[0], true), nil
}

// Requeue makes the dead events ids pending again, due now, with their
// attempts and strikes reset, in one transaction: all of them or, when some
// id is not a dead event, none (the error wraps ErrNotDead and names those
// ids). It returns how many it requeued and wakes the relays (Config.Wake,
// and on PostgreSQL a NOTIFY on Config.Channel).
func (o *Outbox) Requeue(ctx context.Context, ids ...uuid.UUID) (int64, error) {
	seen := map[uuid.UUID]bool{}
	var strs []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			strs = append(strs, id.String())
		}
	}
	if len(strs) == 0 {
		return 0, nil
	}
	notDead, err := o.adm.RequeueIDs(ctx, o.db, strs)
	if err != nil {
		return 0, fmt.Errorf("admin: requeue: %w", err)
	}
	if len(notDead) > 0 {
		return 0, fmt.Errorf("admin: %w: %s (nothing requeued)", ErrNotDead, strings.Join(notDead, ", "))
	}
	o.wake(ctx)
	return int64(len(strs)), nil
}

// RequeueType makes every dead event of type typ pending again (as Requeue)
// and returns how many.
func (o *Outbox) RequeueType(ctx context.Context, typ string) (int64, error) {
	if typ == "" {
		return 0, errors.New("admin: requeue type: no type given")
	}
	n, err := o.adm.RequeueType(ctx, o.db, typ)
	if err != nil {
		return 0, fmt.Errorf("admin: requeue type %s: %w", typ, err)
	}
	if n > 0 {
		o.wake(ctx)
	}
	return n, nil
}

// RequeueAll makes every dead event pending again (as Requeue) and returns
// how many.
func (o *Outbox) RequeueAll(ctx context.Context) (int64, error) {
	n, err := o.adm.RequeueAll(ctx, o.db)
	if err != nil {
		return 0, fmt.Errorf("admin: requeue all: %w", err)
	}
	if n > 0 {
		o.wake(ctx)
	}
	return n, nil
}

// PurgeDead deletes the dead events that died more than olderThan ago (by the
// database's clock), a thousand per statement, and returns how many. It never
// touches pending or published events.
func (o *Outbox) PurgeDead(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("admin: purge dead: negative age %s", olderThan)
	}
	var total int64
	for {
		n, err := o.adm.PurgeDead(ctx, o.db, olderThan, purgeBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("admin: purge dead: %w", err)
		}
		if n < purgeBatch {
			return total, nil
		}
	}
}

// wake tells the relays that events are due: Config.Wake, and on PostgreSQL a
// NOTIFY on Config.Channel. A NOTIFY that fails is logged: the relays find the
// events at their next poll.
func (o *Outbox) wake(ctx context.Context) {
	if o.cfg.Wake != nil {
		o.cfg.Wake()
	}
	if w := o.drv.Waker(); w != nil {
		if err := w.Notify(ctx, o.db, o.cfg.Channel); err != nil {
			o.log.Warn("admin: notify the relays", "channel", o.cfg.Channel, "err", err)
		}
	}
}
