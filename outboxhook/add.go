package outboxhook

import (
	"fmt"

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
