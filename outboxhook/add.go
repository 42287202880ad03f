package outboxhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
// it fails in is aborted, so that it cannot commit without the events.
func Add(tx *gorm.DB, evs ...events.Event) error {
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
	ctxMD := events.MetadataFromContext(st.Context)
	var b batch
	for _, e := range evs {
		rec := events.NewRecord(e, nil)
		enc, err := p.encode(rec, ctxMD)
		if err != nil {
			p.abort(tx)
			return err
		}
		env := events.Envelope{ID: rec.ID, Type: enc.typ, Version: enc.version, OccurredAt: rec.OccurredAt}
		env.Topic = p.cfg.Topic(&env)
		b.add(env, enc)
	}
	if _, err := p.insertBatch(st.Context, st.ConnPool, &b, false); err != nil {
		return fmt.Errorf("outboxhook: add: %w", err)
	}
	if p.cfg.Notify != nil {
		p.cfg.Notify()
	}
	return nil
}

// DefaultMessageType is the event type AddMessages stores for a message that
// carries none in its events.MetaType metadata.
const DefaultMessageType = "message"

// AddMessages writes Watermill messages to the outbox through tx, for the relay
// to publish to topic: the inbox uses it for the messages a handler returns, so
// that they are published only if the handler's transaction commits. A message
// keeps its UUID as the event id when it is a UUID (a new UUIDv7 otherwise), its
// Herald metadata (type, aggregate, occurred_at; type DefaultMessageType when
// absent) and its other metadata. Its payload must be JSON. Errors are those of
// Add.
func AddMessages(tx *gorm.DB, topic string, msgs ...*message.Message) error {
	p, ok := tx.Config.Plugins[Name].(*Plugin)
	if !ok {
		return ErrNotRegistered
	}
	if len(msgs) == 0 || tx.DryRun {
		return nil
	}
	var b batch
	for _, m := range msgs {
		env, err := envelopeOf(m, topic)
		if err != nil {
			p.abort(tx)
			return err
		}
		enc := encodedEvent{payload: env.Payload, version: env.Version, typ: env.Type, metadata: []byte("{}")}
		if !json.Valid(env.Payload) {
			p.abort(tx)
			return fmt.Errorf("%w: message %s: payload is not JSON", ErrEncode, m.UUID)
		}
		if len(env.Payload) > p.cfg.MaxPayloadBytes {
			p.abort(tx)
			return fmt.Errorf("%w: message %s is %d bytes, limit %d", ErrPayloadTooLarge, m.UUID, len(env.Payload), p.cfg.MaxPayloadBytes)
		}
		if len(env.Metadata) > 0 {
			if enc.metadata, err = json.Marshal(env.Metadata); err != nil {
				p.abort(tx)
				return fmt.Errorf("%w: message %s metadata: %w", ErrEncode, m.UUID, err)
			}
		}
		b.add(env, enc)
	}
	if _, err := p.insertBatch(tx.Statement.Context, tx.Statement.ConnPool, &b, false); err != nil {
		return fmt.Errorf("outboxhook: add messages: %w", err)
	}
	if p.cfg.Notify != nil {
		p.cfg.Notify()
	}
	return nil
}

// envelopeOf reads the envelope a message stands for, filling what it lacks.
func envelopeOf(m *message.Message, topic string) (events.Envelope, error) {
	env := events.Envelope{Type: DefaultMessageType, Version: 1, OccurredAt: time.Now().UTC()}
	if m.Metadata.Get(events.MetaType) != "" {
		e, err := events.FromMessage(m)
		if err != nil {
			return events.Envelope{}, fmt.Errorf("outboxhook: %w", err)
		}
		env = e
		if env.OccurredAt.IsZero() {
			env.OccurredAt = time.Now().UTC()
		}
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
	if id, err := events.MessageID(m); err == nil {
		env.ID = id
	} else {
		env.ID = events.NewID()
	}
	env.Topic, env.Payload = topic, m.Payload
	return env, nil
}
