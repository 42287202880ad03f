package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// The outbox in the write-ahead log: each event is one transactional logical
// message (pg_logical_emit_message(true, prefix, content)), which exists iff
// its (sub)transaction commits and which logical decoding (pgoutput with
// messages 'true') streams in commit order. Its content is Message, JSON.

// Message is the content of an event's logical message: the columns of its
// outbox row (store.Row, ID to OccurredAt), the payload and metadata as
// the JSON they are.
type Message struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	Version       int             `json:"version"`
	AggregateType string          `json:"aggregate_type,omitempty"`
	AggregateID   string          `json:"aggregate_id,omitempty"`
	Topic         string          `json:"topic"`
	Payload       json.RawMessage `json:"payload"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	OccurredAt    time.Time       `json:"occurred_at"`
}

// EncodeMessage returns the content of r's logical message.
func EncodeMessage(r *store.Row) ([]byte, error) {
	m := Message{
		ID: r.ID, Type: r.Type, Version: r.Version, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		Topic: r.Topic, Payload: r.Payload, OccurredAt: r.OccurredAt.UTC(),
	}
	if len(r.Metadata) > 0 && string(r.Metadata) != "{}" {
		m.Metadata = r.Metadata
	}
	b, err := json.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("postgres: encode event %s: %w", r.ID, err)
	}
	return b, nil
}

// walOutbox is the outbox in the WAL. Settle and Abort are the table's:
// both work on transaction ids only.
type walOutbox struct {
	*outbox
	prefix string
}

// Present refuses: the WAL keeps no rows to look events up by (the embedded
// table outbox's Present would query a table that is not there, which aborts
// the caller's transaction).
func (o *walOutbox) Present(context.Context, store.Execer, []uuid.UUID) (map[uuid.UUID]bool, error) {
	return nil, errors.New("the WAL outbox keeps no rows to look up")
}

// WALOutbox returns the outbox kept in the WAL as logical messages with
// prefix.
func (Driver) WALOutbox(prefix string) (store.Outbox, error) {
	return &walOutbox{outbox: &outbox{}, prefix: prefix}, nil
}

const (
	emitOne = `SELECT pg_logical_emit_message(true, $1::text, $2::text)`
	// In the events' order (the subquery's, which the outer scan keeps): a
	// transaction's messages are decoded in the order they were written.
	emitMany = `SELECT pg_logical_emit_message(true, $1::text, m)
FROM (SELECT m FROM unnest($2::text[]) WITH ORDINALITY AS u(m, n) ORDER BY n) AS s`
	// The top-level transaction's full id: see Insert.
	emitToken = `SELECT pg_current_xact_id()::text::bigint`
)

// Exists reports true: there is no table to make.
func (*walOutbox) Exists(context.Context, store.Execer) (bool, error) { return true, nil }

// Create does nothing.
func (*walOutbox) Create(context.Context, store.Execer) error { return nil }

// Check returns store.ErrWALLevel (wrapped) unless wal_level is logical.
func (*walOutbox) Check(ctx context.Context, x store.Execer) error {
	return checkWALLevel(ctx, x)
}

// checkWALLevel returns store.ErrWALLevel (wrapped) unless the server's
// wal_level is logical.
func checkWALLevel(ctx context.Context, x store.Execer) error {
	var level string
	if err := sqlkit.QueryRow(ctx, x, `SELECT current_setting('wal_level')`, nil, &level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w (it is %s)", store.ErrWALLevel, level)
	}
	return nil
}

// Insert writes one logical message per event, in x's transaction, and
// reports every event written (the log keeps no ids: an id seen before is
// not told apart). With tokens it returns, for each, the full id of the
// top-level transaction: a savepoint rolled back after the write in a
// transaction the write path cannot watch is not seen by Settle.
func (o *walOutbox) Insert(ctx context.Context, x store.Execer, p store.OutboxInsertParams) (int64, map[uuid.UUID]int64, error) {
	evs, tokens := p.Rows, p.Tokens
	contents := make([]string, len(evs))
	for i := range evs {
		b, err := EncodeMessage(&evs[i])
		if err != nil {
			return 0, nil, err
		}
		contents[i] = string(b)
	}
	var err error
	if len(contents) == 1 {
		_, err = x.ExecContext(ctx, emitOne, o.prefix, contents[0])
	} else {
		_, err = x.ExecContext(ctx, emitMany, o.prefix, contents)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("emit logical messages: %w", err)
	}
	if !tokens {
		return int64(len(evs)), nil, nil
	}
	var top int64
	if err := sqlkit.QueryRow(ctx, x, emitToken, nil, &top); err != nil {
		return 0, nil, fmt.Errorf("read transaction id: %w", err)
	}
	out := make(map[uuid.UUID]int64, len(evs))
	for i := range evs {
		id, err := uuid.Parse(evs[i].ID)
		if err != nil {
			return 0, nil, fmt.Errorf("event id %q: %w", evs[i].ID, err)
		}
		out[id] = top
	}
	return int64(len(evs)), out, nil
}

// LockAggregates does nothing: the log is in commit order, which is each
// aggregate's order.
func (*walOutbox) LockAggregates(context.Context, store.Execer, []int64) error { return nil }

// Reschedule: the log holds no scheduled event (ErrNotSupported).
func (*walOutbox) Reschedule(context.Context, store.Execer, store.RescheduleParams) (store.RescheduleResult, error) {
	return store.RescheduleResult{}, fmt.Errorf("scheduled events in the WAL outbox: %w", store.ErrNotSupported)
}

// MessageRow reads the outbox row of an event from its logical message's
// content (the inverse of EncodeMessage): what the WAL relay inserts into
// the outbox table when it parks an event the broker refuses.
func MessageRow(content []byte) (store.Row, error) {
	var m Message
	if err := json.Unmarshal(content, &m); err != nil {
		return store.Row{}, fmt.Errorf("postgres: decode message: %w", err)
	}
	if _, err := uuid.Parse(m.ID); err != nil {
		return store.Row{}, fmt.Errorf("postgres: decode message: id %q: %w", m.ID, err)
	}
	md := []byte(m.Metadata)
	if len(md) == 0 || string(md) == "null" {
		md = []byte("{}")
	}
	return store.Row{
		ID: m.ID, Type: m.Type, Version: m.Version, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		Topic: m.Topic, Payload: []byte(m.Payload), Metadata: md, OccurredAt: m.OccurredAt,
	}, nil
}
