package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// The stream is handled by goroutines of stream's: the reader receives the
// stream's items (store.WALStream) and passes them on in chunks, in stream
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
	itemEvent            // a Herald event of it: ev, once decoded (nil: undecodable, skipped); lsn is its message's
	itemKeepalive        // the server's keepalive: lsn is its WAL end
)

// item is what the reader passes on to the session.
type item struct {
	kind    int
	lsn     store.LSN
	content []byte // an event's message, until decoded
	ev      *held
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
	st       store.WALStream
	wal      store.WAL // its Decode
	cfg      *Config
	log      *slog.Logger
	out      chan *chunk    // to the session, in stream order
	work     chan *chunk    // to the decoders
	pos      *atomic.Uint64 // the position to report: the session's confirmed
	reported store.LSN      // the last position reported
	err      error          // why it stopped; read once out is closed

	cur    *chunk
	period context.Context // done when the next status report is due
	cancel context.CancelFunc
}

func newReader(st store.WALStream, w store.WAL, cfg *Config, log *slog.Logger, pos *atomic.Uint64) *reader {
	return &reader{st: st, wal: w, cfg: cfg, log: log, pos: pos, cur: &chunk{},
		out: make(chan *chunk, chunksAhead), work: make(chan *chunk, chunksAhead)}
}

// run reads until ctx is done or the connection fails, then closes out and
// work. Its decoders end once work is drained; wg waits for them.
func (rd *reader) run(ctx context.Context, wg *sync.WaitGroup) {
	for range decoders {
		wg.Go(rd.decodeWork)
	}
	defer close(rd.out)
	defer close(rd.work)
	rd.renew(ctx)
	defer func() { rd.cancel() }()
	rd.err = rd.loop(ctx)
}

// decodeWork decodes the events of the chunks of work, until it is closed.
func (rd *reader) decodeWork() {
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
		h, err := rd.decode(it)
		if err != nil {
			rd.log.Error("walrelay: undecodable event skipped", "error", err, "lsn", it.lsn)
		}
		it.ev, it.content = h, nil
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
	lsn := store.LSN(rd.pos.Load())
	if err := rd.st.Report(ctx, lsn); err != nil {
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
		si, err := rd.st.Receive(rd.period)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, store.ErrReceiveTimeout) {
				if err := rd.flush(ctx); err != nil {
					return err
				}
				if err := rd.due(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("walrelay: %w", err)
		}
		var it item
		switch si.Kind {
		case store.StreamKeepalive:
			if si.ReplyRequested {
				if err := rd.report(ctx); err != nil {
					return err
				}
			}
			it = item{kind: itemKeepalive, lsn: si.LSN}
		case store.StreamBegin:
			it = item{kind: itemBegin}
		case store.StreamCommit:
			it = item{kind: itemCommit, lsn: si.LSN}
		case store.StreamMessage:
			it = item{kind: itemEvent, lsn: si.LSN, content: si.Content}
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

// decode makes the event of a logical message (it, an itemEvent): its
// outbox row (to park it) and its message, from one decoding of the content
// (the driver's Decode).
func (rd *reader) decode(it *item) (*held, error) {
	row, err := rd.wal.Decode(it.content)
	if err != nil {
		return nil, err
	}
	env, err := outbound.Envelope(&row)
	if err != nil {
		return nil, fmt.Errorf("walrelay: decode message: %w", err)
	}
	return &held{row: row, env: env, msg: outbound.Message(env), lsn: it.lsn, agg: aggKey(&row)}, nil
}
