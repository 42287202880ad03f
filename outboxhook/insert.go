package outboxhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/ident"
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
	if len(payload) > p.cfg.MaxPayloadBytes {
		return encodedEvent{}, fmt.Errorf("%w: event %s (%s) is %d bytes, limit %d",
			ErrPayloadTooLarge, rec.ID, typ, len(payload), p.cfg.MaxPayloadBytes)
	}
	md := []byte("{}")
	if merged := ctxMD.Merge(rec.Metadata); len(merged) > 0 {
		if md, err = json.Marshal(merged); err != nil {
			return encodedEvent{}, fmt.Errorf("%w %s (%s) metadata: %w", ErrEncode, rec.ID, typ, err)
		}
	}
	return encodedEvent{payload: payload, metadata: md, version: events.VersionOf(rec.Event), typ: typ}, nil
}

// batch is the envelopes one statement inserts, with their encoded parts.
type batch struct {
	envs []events.Envelope
	encs []encodedEvent
}

func (b *batch) add(env events.Envelope, enc encodedEvent) {
	b.envs = append(b.envs, env)
	b.encs = append(b.encs, enc)
}

// args returns the insert's parameters: the columns of one row, or for several
// rows one array per column.
func (b *batch) args() []any {
	if len(b.envs) == 1 {
		e, c := &b.envs[0], &b.encs[0]
		return []any{e.ID.String(), e.Type, int32(e.Version), e.AggregateType, e.AggregateID, e.Topic,
			string(c.payload), string(c.metadata), e.OccurredAt}
	}
	n := len(b.envs)
	var (
		ids, types, aggTypes, aggIDs, topics, payloads, metadata = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions = make([]int32, n)
		occurred = make([]time.Time, n)
	)
	for i := range b.envs {
		e, c := &b.envs[i], &b.encs[i]
		ids[i], types[i], versions[i], aggTypes[i], aggIDs[i] = e.ID.String(), e.Type, int32(e.Version), e.AggregateType, e.AggregateID
		topics[i], payloads[i], metadata[i], occurred[i] = e.Topic, string(c.payload), string(c.metadata), e.OccurredAt
	}
	return []any{ids, types, versions, aggTypes, aggIDs, topics, payloads, metadata, occurred}
}

// insertSQL returns the INSERTs of the outbox, indexed [many][returning]: for a
// single event, or for any number (the columns arrive as arrays, so the text, and
// its prepared plan, never change); silent, or returning per inserted row its id,
// the 32-bit id of the (sub)transaction that inserted it (xmin) and the current
// top-level transaction id, from which xid64 widens the former. Rows that exist
// are left alone.
func insertSQL(table ident.Table) (sql [2][2]string) {
	head := `INSERT INTO ` + table.Quoted() + ` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at) `
	rows := [2]string{
		`VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		`SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])`,
	}
	tails := [2]string{
		` ON CONFLICT (id) DO NOTHING`,
		` ON CONFLICT (id) DO NOTHING RETURNING id::text, xmin::text::bigint, pg_current_xact_id()::text::bigint`,
	}
	for many := range 2 {
		for returning := range 2 {
			sql[many][returning] = head + rows[many] + tails[returning]
		}
	}
	return sql
}

// xid64 widens xmin, a 32-bit (sub)transaction id of the current transaction, to
// the 64-bit full id pg_xact_status takes, using top, the current top-level full
// id: a subtransaction's id is never below its parent's, so xmin is in top's
// epoch unless it wrapped past 2^32 after top.
func xid64(xmin, top int64) int64 {
	epoch := top >> 32
	if xmin < top&0xFFFFFFFF {
		epoch++
	}
	return epoch<<32 | xmin
}

// insertBatch runs the insert on pool and returns how many rows it inserted
// (rows that exist are left alone). With returning it also returns, by event
// id, a token that tells later whether the inserting transaction committed.
func (p *Plugin) insertBatch(ctx context.Context, pool gorm.ConnPool, b *batch, returning bool) (int64, map[uuid.UUID]int64, error) {
	query, args := p.insert[min(len(b.envs)-1, 1)][btoi(returning)], b.args()
	if !returning {
		res, err := pool.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, nil, p.insertError(err)
		}
		n, _ := res.RowsAffected()
		return n, nil, nil
	}
	rows, err := pool.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, nil, p.insertError(err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]int64, len(b.envs))
	for rows.Next() {
		var (
			id        string
			xmin, top int64
		)
		if err := rows.Scan(&id, &xmin, &top); err != nil {
			return 0, nil, p.insertError(err)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return 0, nil, p.insertError(err)
		}
		out[u] = xid64(xmin, top)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, p.insertError(err)
	}
	return int64(len(out)), out, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (p *Plugin) insertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: %s: %w", ErrTableMissing, p.cfg.Table, err)
	}
	return fmt.Errorf("outboxhook: insert into %s: %w", p.cfg.Table, err)
}
