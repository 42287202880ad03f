package outboxhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/store"
)

// encode turns a record into what the outbox stores, checking its type and size.
func (p *Plugin) encode(rec events.Record, ctxMD events.Metadata) (encodedEvent, error) {
	typ, err := events.TypeOf(rec.Event)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("outboxhook: event %s (%T): %w", rec.ID, rec.Event, err)
	}
	if err := p.checkSchedule(rec.Schedule, rec.ID, typ); err != nil {
		return encodedEvent{}, err
	}
	payload, err := p.cfg.Codec.Marshal(rec.Event)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("%w %s (%s): %w", ErrEncode, rec.ID, typ, err)
	}
	_, stdJSON := p.cfg.Codec.(events.JSON)
	if err := p.checkPayload(payload, rec.ID, typ, stdJSON); err != nil {
		return encodedEvent{}, err
	}
	if p.cfg.EventMetadata != nil {
		ctxMD = ctxMD.Merge(p.cfg.EventMetadata(rec.Event))
	}
	// The event's deduplication key (events.Deduplicated); metadata given at
	// record time wins.
	if dk := events.DedupMetadata(rec.Event); dk != nil {
		ctxMD = ctxMD.Merge(dk)
	}
	merged := ctxMD.Merge(rec.Metadata)
	md, err := p.encodeMetadata(merged, rec.ID, typ)
	if err != nil {
		return encodedEvent{}, err
	}
	return encodedEvent{payload: payload, metadata: md, md: merged, version: events.VersionOf(rec.Event), typ: typ, sched: rec.Schedule}, nil
}

// batch is the events one statement inserts.
type batch struct {
	evs []store.Row
}

func (b *batch) add(env events.Envelope, enc encodedEvent) {
	s := enc.sched
	row := store.Row{
		ID: env.ID.String(), Type: enc.typ, Version: enc.version, AggregateType: env.AggregateType,
		AggregateID: env.AggregateID, Topic: env.Topic, Payload: enc.payload, Metadata: enc.metadata,
		OccurredAt: env.OccurredAt, Schedule: storeSchedule(s),
	}
	if s.Apart && (row.AggregateType != "" || row.AggregateID != "") {
		// Out of its aggregate's order: the row names no aggregate (ordered
		// claims order by the columns), the metadata does.
		row.Metadata = apartMetadata(enc, row.AggregateType, row.AggregateID)
		row.AggregateType, row.AggregateID = "", ""
	}
	b.evs = append(b.evs, row)
}

// insertBatch inserts b through pool and returns how many rows it inserted
// (rows that exist are left alone); with tokens, also what Settle needs later.
// It writes nothing when an event's text columns cannot be stored (checkFields).
func (p *Plugin) insertBatch(ctx context.Context, pool gorm.ConnPool, b *batch, tokens bool) (int64, map[uuid.UUID]int64, error) {
	for i := range b.evs {
		if err := checkFields(&b.evs[i]); err != nil {
			return 0, nil, err
		}
	}
	n, toks, err := p.out.Insert(ctx, pool, store.OutboxInsertParams{Rows: b.evs, Tokens: tokens})
	if err != nil {
		if errors.Is(err, store.ErrTableMissing) {
			return 0, nil, fmt.Errorf("%w: %s: %w", ErrTableMissing, p.cfg.Table, err)
		}
		return 0, nil, fmt.Errorf("outboxhook: %s: %w", p.dest, err)
	}
	return n, toks, nil
}

// checkSchedule checks the schedule s of event id of type typ: its key stored
// as given on every database within [MaxFieldLength] characters
// ([ErrEncode]), and a table to hold it ([ErrScheduledWAL]).
func (p *Plugin) checkSchedule(s events.Schedule, id uuid.UUID, typ string) error {
	if s.IsZero() {
		return nil
	}
	if p.cfg.Storage == StorageWAL && (!s.At.IsZero() || s.After > 0 || s.Key != "") {
		return fmt.Errorf("%w: event %s (%s)", ErrScheduledWAL, id, typ)
	}
	if err := storableText(s.Key); err != nil {
		return fmt.Errorf("%w %s (%s): schedule key %w", ErrEncode, id, typ, err)
	}
	if n := utf8.RuneCountInString(s.Key); n > MaxFieldLength {
		return fmt.Errorf("%w %s (%s): schedule key is %d characters, at most %d", ErrEncode, id, typ, n, MaxFieldLength)
	}
	return nil
}

// apartMetadata is the encoded metadata of an event scheduled apart from its
// aggregate (aggType, aggID): enc's, with the aggregate's Herald keys, which
// the row's columns no longer carry.
func apartMetadata(enc encodedEvent, aggType, aggID string) []byte {
	md := enc.md.Merge(events.Metadata{events.MetaAggregateType: aggType, events.MetaAggregateID: aggID})
	b, err := json.Marshal(md)
	if err != nil { // strings only: cannot fail
		return enc.metadata
	}
	return b
}
