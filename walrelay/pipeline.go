package walrelay

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/heraldgo/herald/internal/outbound"
)

// The stream is handled by goroutines of stream's: the reader receives and
// parses the replication messages and passes them on in chunks, in stream
// order, through a channel; decoders (decoders of them) decode the chunks'
// events meanwhile, in parallel; stream's own goroutine (the session) takes
// each chunk once decoded, in order, publishes the events, parks the
// refused and confirms the position. The reader also owns the connection's
// writes: it reports the position the session confirmed every
// Config.StatusInterval, and when the server asks, also while the session
// is busy publishing.

// Kinds of item.
const (
	itemBegin     = iota // a transaction begins
	itemCommit           // it committed: lsn is its end
	itemEvent            // a Herald event of it: ev, once decoded (nil: undecodable, skipped)
	itemKeepalive        // the server's keepalive: lsn is its WAL end
)

// item is what the reader passes on to the session.
type item struct {
	kind int
	lsn  pglogrepl.LSN
	raw  *pglogrepl.LogicalDecodingMessage // an event's, until decoded
	ev   *held
}

// chunk is items the reader passes on together: a transaction, or
// chunkEvents events of one, or a keepalive. Its events are decoded by a
// decoder before the session takes it.
type chunk struct {
	items  []item
	events int
	done   chan struct{} // closed once its events are decoded; nil: none
}

const (
	chunkEvents  = 64 // events at most in a chunk
	chunksAhead  = 64 // chunks the reader reads ahead of the session, at most
	inlineEvents = 4  // events of a chunk the reader decodes itself while the session waits
)

// decoders is how many goroutines decode events: the JSON decoding is most
// of a stream's cost in the relay's process.
var decoders = min(max(runtime.GOMAXPROCS(0), 1), 4)

// reader reads the stream ahead of the session.
type reader struct {
	conn     *pgconn.PgConn
	cfg      *Config
	log      *slog.Logger
	out      chan *chunk    // to the session, in stream order
	work     chan *chunk    // to the decoders
	pos      *atomic.Uint64 // the position to report: the session's confirmed
	reported pglogrepl.LSN  // the last position reported
	err      error          // why it stopped; read once out is closed

	cur    *chunk
	period context.Context // done when the next status report is due
	cancel context.CancelFunc
}

func newReader(conn *pgconn.PgConn, cfg *Config, log *slog.Logger, pos *atomic.Uint64) *reader {
	return &reader{conn: conn, cfg: cfg, log: log, pos: pos, cur: &chunk{},
		out: make(chan *chunk, chunksAhead), work: make(chan *chunk, chunksAhead)}
}

// run reads until ctx is done or the connection fails, then closes out and
// work. Its decoders end once work is drained; wg waits for them.
func (rd *reader) run(ctx context.Context, wg *sync.WaitGroup) {
	for range decoders {
		wg.Go(rd.decode)
	}
	defer close(rd.out)
	defer close(rd.work)
	rd.renew(ctx)
	defer func() { rd.cancel() }()
	rd.err = rd.loop(ctx)
}

// decode decodes the events of the chunks of work, until it is closed.
func (rd *reader) decode() {
	for c := range rd.work {
		rd.decodeChunk(c)
		close(c.done)
	}
}

// decodeChunk decodes the events of c.
func (rd *reader) decodeChunk(c *chunk) {
	for i := range c.items {
		it := &c.items[i]
		if it.kind != itemEvent {
			continue
		}
		h, err := decode(it.raw)
		if err != nil {
			rd.log.Error("walrelay: undecodable event skipped", "error", err, "lsn", it.raw.LSN)
		}
		it.ev, it.raw = h, nil
	}
}

// renew starts the period until the next status report.
func (rd *reader) renew(ctx context.Context) {
	if rd.cancel != nil {
		rd.cancel()
	}
	rd.period, rd.cancel = context.WithTimeout(ctx, rd.cfg.StatusInterval)
}

// report sends the confirmed position to the server and starts the next
// period.
func (rd *reader) report(ctx context.Context) error {
	lsn := pglogrepl.LSN(rd.pos.Load())
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, rd.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn}); err != nil {
		return fmt.Errorf("walrelay: send status: %w", err)
	}
	rd.reported = lsn
	rd.renew(ctx)
	return nil
}

// due reports the position once the period ended, unless ctx is done.
func (rd *reader) due(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return rd.report(ctx)
}

func (rd *reader) loop(ctx context.Context) error {
	for {
		raw, err := rd.conn.ReceiveMessage(rd.period)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if err := rd.flush(ctx); err != nil {
					return err
				}
				if err := rd.due(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("walrelay: receive: %w", err)
		}
		var data []byte
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("walrelay: stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			data = m.Data
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		var it item
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("walrelay: keepalive: %w", err)
			}
			if k.ReplyRequested {
				if err := rd.report(ctx); err != nil {
					return err
				}
			}
			it = item{kind: itemKeepalive, lsn: k.ServerWALEnd}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("walrelay: xlog data: %w", err)
			}
			msg, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				continue // a message pgoutput sends that pglogrepl does not parse: not Herald's
			}
			switch m := msg.(type) {
			case *pglogrepl.BeginMessage:
				it = item{kind: itemBegin}
			case *pglogrepl.CommitMessage:
				it = item{kind: itemCommit, lsn: m.TransactionEndLSN}
			case *pglogrepl.LogicalDecodingMessage:
				if !m.Transactional || m.Prefix != rd.cfg.Prefix {
					continue
				}
				m.Content = bytes.Clone(m.Content) // it was the connection's buffer, which the next receive reuses
				it = item{kind: itemEvent, raw: m}
			default:
				continue
			}
		default:
			continue
		}
		rd.cur.items = append(rd.cur.items, it)
		if it.kind == itemEvent {
			rd.cur.events++
		}
		// A transaction comes whole once committed (pgoutput protocol 1
		// does not stream one in progress): the chunk waits for nothing
		// at its end, or at a keepalive.
		if it.kind == itemCommit || it.kind == itemKeepalive || rd.cur.events >= chunkEvents {
			if err := rd.flush(ctx); err != nil {
				return err
			}
		}
	}
}

// flush passes the current chunk on: to the decoders when it has events,
// and to the session; it reports the position while it waits.
func (rd *reader) flush(ctx context.Context) error {
	c := rd.cur
	if len(c.items) == 0 {
		return nil
	}
	rd.cur = &chunk{items: make([]item, 0, len(c.items))}
	switch {
	case c.events == 0:
	case c.events <= inlineEvents && len(rd.out) == 0:
		// The session waits for it: decoded here, it reaches the
		// publisher a goroutine's hand-over sooner.
		rd.decodeChunk(c)
	default:
		c.done = make(chan struct{})
		if err := rd.pass(ctx, rd.work, c); err != nil {
			return err
		}
	}
	return rd.pass(ctx, rd.out, c)
}

// pass sends c on ch, reporting the position while it waits.
func (rd *reader) pass(ctx context.Context, ch chan<- *chunk, c *chunk) error {
	for {
		select {
		case ch <- c:
			return nil
		case <-rd.period.Done():
			if err := rd.due(ctx); err != nil {
				return err
			}
		}
	}
}

// inbox is the session's side of the reader's chunks: the items one by
// one, in stream order, each chunk once decoded.
type inbox struct {
	ch  <-chan *chunk
	cur *chunk
	i   int
}

// ready reports whether an item is there without waiting (a chunk received
// waits only for its decoding).
func (in *inbox) ready() bool {
	if in.cur != nil && in.i < len(in.cur.items) {
		return true
	}
	select {
	case c, ok := <-in.ch:
		if !ok {
			return false
		}
		in.set(c)
		return true
	default:
		return false
	}
}

func (in *inbox) set(c *chunk) {
	if c.done != nil {
		<-c.done
	}
	in.cur, in.i = c, 0
}

// next returns the next item of the current chunk (after ready, or wait).
func (in *inbox) next() item {
	it := in.cur.items[in.i]
	in.cur.items[in.i] = item{}
	in.i++
	return it
}

// decode makes the event of a logical message: its outbox row (to park it)
// and its message, from one decoding of the content.
func decode(m *pglogrepl.LogicalDecodingMessage) (*held, error) {
	row, err := messageRow(m.Content)
	if err != nil {
		return nil, err
	}
	env, err := outbound.Envelope(&row)
	if err != nil {
		return nil, fmt.Errorf("walrelay: decode message: %w", err)
	}
	return &held{row: row, env: env, msg: outbound.Message(env), lsn: m.LSN, agg: aggKey(&row)}, nil
}
