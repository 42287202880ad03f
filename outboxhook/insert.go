package outboxhook

import (
	"context"
	"errors"
	"fmt"

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
	merged := ctxMD.Merge(rec.Metadata)
	md, err := p.encodeMetadata(merged, rec.ID, typ)
	if err != nil {
		return encodedEvent{}, err
	}
	return encodedEvent{payload: payload, metadata: md, md: merged, version: events.VersionOf(rec.Event), typ: typ}, nil
}

// batch is the events one statement inserts.
type batch struct {
	evs []store.Row
}

func (b *batch) add(env events.Envelope, enc encodedEvent) {
	b.evs = append(b.evs, store.Row{
		ID: env.ID.String(), Type: enc.typ, Version: enc.version, AggregateType: env.AggregateType,
		AggregateID: env.AggregateID, Topic: env.Topic, Payload: enc.payload, Metadata: enc.metadata,
		OccurredAt: env.OccurredAt,
	})
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
