package outboxhook

import (
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
)

// Add writes events that belong to no aggregate to the outbox through tx: in its
// transaction when tx is one (db.Transaction, db.Begin), else as one atomic
// statement. Each event gets a new UUIDv7 id; metadata attached to tx's context
// with events.WithMetadata is stored with it. All events go in one INSERT.
//
// It fails with [ErrNotRegistered] when the plugin is not registered on tx, and
// with the errors of a save ([ErrEncode], [ErrPayloadTooLarge],
// events.ErrEmptyType, [ErrTableMissing]) before writing anything; a transaction
// it fails in cannot commit (see [Config.Notify] for when the relay is woken).
func Add(tx *gorm.DB, evs ...events.Event) error {
	return add(tx, events.Schedule{}, evs)
}

// add is Add of events scheduled by s.
func add(tx *gorm.DB, s events.Schedule, evs []events.Event) error {
	p, ok := tx.Config.Plugins[Name].(*Plugin)
	if !ok {
		return ErrNotRegistered
	}
	if len(evs) == 0 || tx.DryRun {
		return nil
	}
	if tx.Error != nil {
		return tx.Error
	}
	st := tx.Statement
	ctxMD := contextMetadata(st.Context)
	var b batch
	for _, e := range evs {
		rec := events.NewRecord(e, nil)
		rec.Schedule = s
		enc, err := p.encode(rec, ctxMD)
		if err != nil {
			p.abort(tx, err)
			return err
		}
		env := events.Envelope{ID: rec.ID, Type: enc.typ, Version: enc.version, OccurredAt: rec.OccurredAt, Metadata: enc.md}
		env.Topic = p.cfg.Topic(&env)
		b.add(env, enc)
	}
	if _, err := p.insertAdded(tx, &b); err != nil {
		return fmt.Errorf("outboxhook: add: %w", err)
	}
	return nil
}

// insertAdded inserts events of Add or AddMessages through tx, serializing the
// writers of the aggregates they name, and wakes the relay: at the commit of
// tx's transaction when the plugin sees it, else now.
func (p *Plugin) insertAdded(tx *gorm.DB, b *batch) (int64, error) {
	ctx, pool := tx.Statement.Context, tx.Statement.ConnPool
	var locks []int64
	for _, env := range b.evs {
		if env.AggregateType != "" || env.AggregateID != "" {
			locks = append(locks, aggregateLockKey(env.AggregateType, env.AggregateID))
		}
	}
	if err := p.lockAggregates(ctx, pool, locks); err != nil {
		p.abort(tx, err)
		return 0, err
	}
	n, _, err := p.insertBatch(ctx, pool, b, false)
	if err != nil {
		p.abort(tx, err)
		return 0, err
	}
	if t := txnOf(pool); t != nil {
		t.wrote(nil, true)
	} else {
		p.notify()
	}
	return n, nil
}

// DefaultMessageType is the event type AddMessages stores for a message that
// carries none in its events.MetaType metadata.
const DefaultMessageType = "message"

// AddMessages writes Watermill messages to the outbox through tx, for the relay
// to publish to topic: the inbox uses it for the messages a handler returns, so
// that they are published only if the handler's transaction commits.
//
// A message's event id is its UUID when that is a UUID, else a new UUIDv7; the
// events.MetaID metadata a message may carry (copied from the message a
// handler received, say) is ignored. Two messages with one id, or a message
// whose id is already in the outbox, fail with [ErrDuplicateID]: nothing is
// dropped silently (with StorageWAL only the former: the log keeps no index
// of ids). A message keeps its Herald metadata (type, version,
// aggregate, occurred_at; type DefaultMessageType when absent) and its other
// metadata. Its payload must be JSON that every database stores as given (see
// [ErrEncode]). Other errors are those of Add.
func AddMessages(tx *gorm.DB, topic string, msgs ...*message.Message) error {
	p, ok := tx.Config.Plugins[Name].(*Plugin)
	if !ok {
		return ErrNotRegistered
	}
	if len(msgs) == 0 || tx.DryRun {
		return nil
	}
	if tx.Error != nil {
		return tx.Error
	}
	var (
		b    batch
		seen = make(map[uuid.UUID]bool, len(msgs))
	)
	fail := func(err error) error {
		p.abort(tx, err)
		return err
	}
	trace := traceMetadata(tx.Statement.Context)
	for _, m := range msgs {
		env, err := envelopeOf(m, topic)
		if err != nil {
			return fail(err)
		}
		// The span the messages are produced in (a handler's, under the inbox)
		// is their parent, not one whose context a handler copied over.
		env.Metadata = env.Metadata.Merge(trace)
		if seen[env.ID] {
			return fail(fmt.Errorf("%w: two messages have id %s", ErrDuplicateID, env.ID))
		}
		seen[env.ID] = true
		if err := p.checkPayload(env.Payload, env.ID, env.Type, false); err != nil {
			return fail(fmt.Errorf("message %s: %w", m.UUID, err))
		}
		md, err := p.encodeMetadata(env.Metadata, env.ID, env.Type)
		if err != nil {
			return fail(fmt.Errorf("message %s: %w", m.UUID, err))
		}
		enc := encodedEvent{payload: env.Payload, version: env.Version, typ: env.Type, metadata: md}
		b.add(env, enc)
	}
	n, err := p.insertAdded(tx, &b)
	if err != nil {
		return fmt.Errorf("outboxhook: add messages: %w", err)
	}
	if n < int64(len(msgs)) {
		return fail(fmt.Errorf("%w: %d of %d messages have ids already in the outbox", ErrDuplicateID, int64(len(msgs))-n, len(msgs)))
	}
	return nil
}

// envelopeOf reads the envelope a message stands for, filling what it lacks.
func envelopeOf(m *message.Message, topic string) (events.Envelope, error) {
	env := events.Envelope{Type: DefaultMessageType, Version: 1}
	if m.Metadata.Get(events.MetaType) != "" {
		e, err := events.ParseEnvelope(m.UUID, m.Metadata, m.Payload)
		if err != nil {
			return events.Envelope{}, fmt.Errorf("outboxhook: %w", err)
		}
		env = e
	} else {
		for k, v := range m.Metadata {
			if !strings.HasPrefix(k, events.MetaPrefix) {
				if env.Metadata == nil {
					env.Metadata = events.Metadata{}
				}
				env.Metadata[k] = v
			}
		}
	}
	if env.OccurredAt.IsZero() {
		env.OccurredAt = time.Now().UTC()
	}
	if id, err := uuid.Parse(m.UUID); err == nil && id != uuid.Nil {
		env.ID = id
	} else {
		env.ID = events.NewID()
	}
	env.Topic, env.Payload = topic, m.Payload
	return env, nil
}
