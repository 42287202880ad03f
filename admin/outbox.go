package admin

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/walrelay"
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
	out   store.Outbox // Reschedule
	rel   store.Relay  // Stats: the scheduled figures
	table ident.Table
	log   *slog.Logger
}

// Open returns the operations on the outbox table cfg.Table of db (cfg's
// other fields that concern them: MaxAge, WALSlot, MaxWALLag, Wake, Channel,
// Logger). It fails with ErrTableMissing when the table does not exist,
// unless cfg.WALSlot is set (StorageWAL keeps no table).
func Open(ctx context.Context, db *gorm.DB, cfg Config) (*Outbox, error) {
	o, err := newOutbox(db, cfg)
	if err != nil {
		return nil, err
	}
	ok, err := o.tableExists(ctx)
	if err != nil {
		return nil, err
	}
	if !ok && o.cfg.WALSlot == "" {
		return nil, fmt.Errorf("admin: %w: %s", ErrTableMissing, o.table)
	}
	return o, nil
}

func (o *Outbox) tableExists(ctx context.Context) (bool, error) {
	ok, err := o.drv.Outbox(o.table).Exists(ctx, o.db)
	if err != nil {
		return false, fmt.Errorf("admin: look up table %s: %w", o.table, err)
	}
	return ok, nil
}

func newOutbox(db *gorm.DB, cfg Config) (*Outbox, error) {
	table, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("admin: db is required")
	}
	conn, err := drivers.Open(db, "") // the table is parsed
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if cfg.WALSlot != "" && conn.Driver.WAL() == nil { // the slot of a WAL relay: PostgreSQL's
		return nil, fmt.Errorf("admin: WALSlot needs PostgreSQL, not %s", conn.Driver.Name())
	}
	return &Outbox{
		cfg:   cfg,
		db:    conn.DB,
		drv:   conn.Driver,
		adm:   conn.Driver.Admin(table),
		out:   conn.Driver.Outbox(table),
		rel:   conn.Driver.Relay(table),
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
	// insert or, for a requeued event, its last requeue, by the database's
	// clock) in seconds; 0 when none is pending.
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
	// Scheduled are the figures of the scheduled events: how many wait, when
	// the next comes due, how long the earliest due one has waited to be
	// published; nil when the table is missing.
	Scheduled *ScheduledFigures `json:"scheduled,omitempty"`
	// TableMissing is true when the outbox table does not exist, which
	// only Config.WALSlot allows (StorageWAL keeps no table): the figures
	// are then zero.
	TableMissing bool `json:"table_missing,omitempty"`
	// Relays is what the database says of the relays: which are alive, when
	// each was last seen, the due backlog (Outbox.Relays); nil when the
	// table is missing.
	Relays *Relays `json:"relays,omitempty"`
	// WAL is the WAL relay's slot (Config.WALSlot); nil without one.
	WAL *walrelay.SlotStatus `json:"wal_slot,omitempty"`
	// Healthy is true when there is no problem.
	Healthy bool `json:"healthy"`
	// Problems say what is unhealthy: dead events, an oldest pending event
	// older than Config.MaxAge (in ordered mode, Relays.Ordered, not one
	// held in line behind a scheduled event of its aggregate), due events
	// waiting past Config.RelayTimeout while no relay is alive
	// (Relays.Problem) and, with Config.WALSlot, a slot that is missing,
	// invalidated or lagging past Config.MaxWALLag. Empty when healthy.
	Problems []string `json:"problems"`
}

// Status reads the figures per topic, sums them, reads the scheduled events'
// figures, and judges them: dead events, or a pending event older than
// Config.MaxAge, are problems; so are, with Config.WALSlot, a missing or
// invalidated slot and a lag past Config.MaxWALLag.
func (o *Outbox) Status(ctx context.Context) (Status, error) {
	s := Status{Table: o.table.String(), Database: o.drv.Name(), At: time.Now().UTC(), Topics: []Figures{}, Problems: []string{}}
	if o.cfg.WALSlot != "" {
		ok, err := o.tableExists(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("admin: status: %w", err)
		}
		s.TableMissing = !ok
	}
	if !s.TableMissing {
		if err := o.tableStatus(ctx, &s); err != nil {
			return Status{}, err
		}
		rs, err := o.Relays(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("admin: status: %w", err)
		}
		s.Relays = &rs
	}
	if s.Total.Dead > 0 {
		s.Problems = append(s.Problems, plural(s.Total.Dead, "dead event"))
	}
	if age := s.Total.OldestPending(); o.cfg.MaxAge > 0 && age > o.cfg.MaxAge {
		if s.Scheduled != nil && s.Scheduled.Count > 0 && s.Relays.ordered() {
			// Ordered relays hold events in line behind scheduled events:
			// those wait by design (store.Relay.OldestUnheld).
			unheld, err := o.rel.OldestUnheld(ctx, o.db)
			if err != nil {
				return Status{}, fmt.Errorf("admin: status: %w", err)
			}
			age = unheld
		}
		if age > o.cfg.MaxAge {
			s.Problems = append(s.Problems, fmt.Sprintf("the oldest pending event is %s old, over %s", Age(age), o.cfg.MaxAge))
		}
	}
	if s.Relays != nil && s.Relays.Problem != "" {
		s.Problems = append(s.Problems, s.Relays.Problem)
	}
	if o.cfg.WALSlot != "" {
		w, err := walrelay.ReadSlot(ctx, o.db, o.cfg.WALSlot)
		if err != nil {
			return Status{}, fmt.Errorf("admin: status: %w", err)
		}
		s.WAL = &w
		if err := w.Problem(); err != nil {
			s.Problems = append(s.Problems, strings.TrimPrefix(err.Error(), "walrelay: "))
		} else if o.cfg.MaxWALLag > 0 && w.LagBytes > o.cfg.MaxWALLag {
			s.Problems = append(s.Problems, fmt.Sprintf("WAL slot %s lags by %s, over %s", w.Slot, Bytes(w.LagBytes), Bytes(o.cfg.MaxWALLag)))
		}
	}
	s.Healthy = len(s.Problems) == 0
	return s, nil
}

// tableStatus reads the table's figures into s.
func (o *Outbox) tableStatus(ctx context.Context, s *Status) error {
	topics, err := o.adm.Topics(ctx, o.db)
	if err != nil {
		return fmt.Errorf("admin: status: %w", err)
	}
	retains, err := o.adm.RetainsPublished(ctx, o.db)
	if err != nil {
		return fmt.Errorf("admin: status: %w", err)
	}
	s.RetainsPublished = retains
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
	sf, err := o.scheduledFigures(ctx)
	if err != nil {
		return err
	}
	s.Scheduled = &sf
	return nil
}

// Bytes formats a size in bytes for a person: 512 B, 3.2 MiB, 1 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
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

func deadEvent(d store.Row, withBody bool) DeadEvent {
	e := DeadEvent{ID: d.ID, Type: d.Type, Version: d.Version, Topic: d.Topic, AggregateType: d.AggregateType, AggregateID: d.AggregateID,
		OccurredAt: d.OccurredAt.UTC(), Attempts: d.Attempts, Strikes: d.Strikes, LastError: d.LastError, DeadAt: d.DeadAt.UTC()}
	if withBody {
		e.Payload, e.Metadata = rawJSON(d.Payload), rawJSON(d.Metadata)
	}
	return e
}

// rawJSON returns b compacted when it is JSON (the databases store it with
// different spacing), with the escapes of <, > and & that encoding/json
// writes by default turned back into the characters (the same JSON, which a
// person reads), else b as a JSON string.
func rawJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return unescapeHTML(buf.Bytes())
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(b))
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// unescapeHTML replaces, in the strings of the valid JSON b, the escapes
// \u003c, \u003e and \u0026 (any case) by <, > and &; b is changed in place.
// An escaped backslash before "u003c" is left alone.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := b[:0]
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch strings.ToLower(string(b[i+2 : i+6])) {
			case "003c":
				out, i = append(out, '<'), i+5
				continue
			case "003e":
				out, i = append(out, '>'), i+5
				continue
			case "0026":
				out, i = append(out, '&'), i+5
				continue
			}
		}
		// Another escape: keep it whole, so that its second character
		// (an escaped backslash) starts nothing.
		out, i = append(out, c, b[i+1]), i+1
	}
	return out
}

// DeadFilter picks dead events; its conditions are ANDed, and the zero filter
// picks them all.
type DeadFilter struct {
	// IDs: only these events, when not empty. Defaults to none: any event.
	IDs []uuid.UUID
	// Type: only events of this type, when not empty. Defaults to empty: any
	// type.
	Type string
	// OlderThan: only events that died more than this long ago (by the
	// database's clock), when > 0. Defaults to 0: any age.
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

// FailingFilter picks failing events: pending (neither published nor dead)
// events whose publish failed at least once, which the relays retry. The zero
// filter picks them all.
type FailingFilter struct {
	// Type: only events of this type, when not empty. Defaults to empty: any
	// type.
	Type string
}

// FailingEvent is a failing event: its envelope, its failed attempts and
// strikes so far, the last error, when it failed last and when the relays
// try it next.
type FailingEvent struct {
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
	// LastFailedAt is when the last attempt failed; zero (null in JSON)
	// when the table does not record it.
	LastFailedAt *time.Time `json:"last_failed_at"`
	// NextAttemptAt is when the event is due again (a relay that holds it
	// in SQLite's lease has the lease's end here).
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

// Aggregate is "type id", or "" for an event of no aggregate.
func (e FailingEvent) Aggregate() string {
	return strings.TrimSpace(e.AggregateType + " " + e.AggregateID)
}

// FailureGroup is the failing events of one type whose last attempt failed
// with the same error: what one cause of failure holds up.
type FailureGroup struct {
	Type      string `json:"type"`
	LastError string `json:"last_error"`
	// Events counts the group's events.
	Events int64 `json:"events"`
	// MaxAttempts is the most failed attempts one of them has made.
	MaxAttempts int `json:"max_attempts"`
	// NextAttemptAt is the soonest next attempt of one of them.
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// LastFailedAt is the latest failure of one of them; null when the
	// table does not record it.
	LastFailedAt *time.Time `json:"last_failed_at"`
}

// optTime is t in UTC, or nil when zero.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Failing lists up to limit failing events f picks, soonest next attempt
// first, without their payloads and metadata.
func (o *Outbox) Failing(ctx context.Context, f FailingFilter, limit int) ([]FailingEvent, error) {
	rows, err := o.adm.FindFailing(ctx, o.db, store.FailingFilter{Type: f.Type}, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: list failing: %w", err)
	}
	out := make([]FailingEvent, len(rows))
	for i, r := range rows {
		out[i] = FailingEvent{ID: r.ID, Type: r.Type, Version: r.Version, Topic: r.Topic, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
			OccurredAt: r.OccurredAt.UTC(), Attempts: r.Attempts, Strikes: r.Strikes, LastError: r.LastError,
			LastFailedAt: optTime(r.LastFailedAt), NextAttemptAt: r.NextAttemptAt.UTC()}
	}
	return out, nil
}

// FailingGroups groups the failing events f picks by type and last error and
// returns up to limit groups, the largest first (then by type and error).
func (o *Outbox) FailingGroups(ctx context.Context, f FailingFilter, limit int) ([]FailureGroup, error) {
	gs, err := o.adm.FailingGroups(ctx, o.db, store.FailingFilter{Type: f.Type}, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: group failing: %w", err)
	}
	out := make([]FailureGroup, len(gs))
	for i, g := range gs {
		out[i] = FailureGroup{Type: g.Type, LastError: g.LastError, Events: g.Events, MaxAttempts: g.MaxAttempts,
			NextAttemptAt: g.NextAttemptAt.UTC(), LastFailedAt: optTime(g.LastFailedAt)}
	}
	return out, nil
}

// Requeue makes the dead events ids pending again, due now, with their
// attempts and strikes reset and their age counted from now (the oldest
// pending age, Figures.OldestPendingSeconds, measures a requeued event from
// its requeue), in one transaction: all of them or, when some
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
	if o.drv.Caps().Has(store.Listen) {
		if err := o.drv.Waker().Notify(ctx, o.db, o.cfg.Channel); err != nil {
			o.log.Warn("admin: notify the relays", "channel", o.cfg.Channel, "err", err)
		}
	}
}
