package walrelay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// Run sets up (Setup) and streams the slot until ctx is cancelled, then
// reports the position confirmed so far to the server and returns nil. A
// lost connection or a failing publisher does not stop it: it logs, waits
// Config.RetryInterval and resumes from the last confirmed position. What
// Setup finds wrong ([ErrWALLevel], [ErrReplicationRight], [ErrSlot]) does:
// Run returns it. A slot that vanishes while Run runs (between two of its
// connections) is such an [ErrSlot] (a [SlotLostError]): Run does not make
// it again.
//
// One relay streams a slot at a time: while another streams it (the server
// says the slot "is active"), Run waits, trying again every
// Config.RetryInterval, logging at Info once and at Debug after, and takes
// over as soon as the other's stream ends.
func (r *Relay) Run(ctx context.Context) error {
	waiting := false
	for {
		var err error
		if !waiting { // while waiting for the slot, Setup did its work
			err = r.Setup(ctx)
		}
		if err == nil {
			err = r.stream(ctx)
		}
		select {
		case <-ctx.Done():
			return nil // cancelled: err is the cancellation's
		default:
		}
		if errors.Is(err, ErrWALLevel) || errors.Is(err, ErrReplicationRight) || errors.Is(err, ErrSlot) {
			return err
		}
		switch active := r.wal.SlotActive(err); {
		case active && !waiting:
			r.log.InfoContext(ctx, "walrelay: slot streamed by another relay; waiting to take over",
				"error", err, "retry_every", r.cfg.RetryInterval)
			waiting = true
		case active:
			r.log.DebugContext(ctx, "walrelay: slot still streamed by another relay", "error", err)
		default:
			waiting = false
			r.log.WarnContext(ctx, "walrelay: streaming failed; retrying", "error", err, "retry_in", r.cfg.RetryInterval)
		}
		if !outbound.Sleep(ctx, r.cfg.RetryInterval) {
			return nil
		}
	}
}

// stream streams the slot on a replication connection of its own until ctx
// is cancelled or the connection fails: the reader (stream.go) reads and
// decodes ahead while the session takes what it read (follow); the parked
// relay (Config.Parked) runs meanwhile.
func (r *Relay) stream(ctx context.Context) error {
	st, err := r.wal.Stream(ctx, store.StreamParams{DSN: r.dsn, Slot: r.cfg.Slot, Publication: r.cfg.Publication, Prefix: r.cfg.Prefix})
	if err != nil {
		return fmt.Errorf("walrelay: %w", err)
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	db, err := openDB(r.dsn)
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(2)
	s := &session{r: r, db: db, c: r.caller, pendingAggs: map[string]bool{}}
	if err := s.loadParked(ctx); err != nil {
		return err
	}
	r.log.InfoContext(ctx, "walrelay: streaming")
	if r.cfg.Parked != nil { // its table relay, while this stream lasts
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { r.runParked(pctx) })
		defer func() { stop(); wg.Wait() }()
	}
	// The reader, ahead of the session, while this stream lasts; then the
	// position confirmed last is reported (the reader is done with the
	// connection).
	rd := newReader(st, r.wal, &r.cfg, r.log, &s.pos)
	rctx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup // the reader and its decoders
	readers.Go(func() { rd.run(rctx, &readers) })
	defer func() {
		stopReading()
		readers.Wait()
		r.saw(s.confirmed)
		if s.confirmed > rd.reported {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if err := st.Report(sctx, s.confirmed); err != nil {
				r.log.WarnContext(ctx, "walrelay: final status not sent", "error", err, "lsn", s.confirmed)
			}
		}
	}()
	return s.follow(ctx, rd)
}

// follow is the session's side of a stream: it retries the held events when
// due, takes what the reader read, up to a call's worth of events, and
// publishes it (flush), until ctx is cancelled or something fails.
func (s *session) follow(ctx context.Context, rd *reader) error {
	cfg := &s.r.cfg
	in := &inbox{ch: rd.out}
	wake := time.NewTimer(time.Hour) // the next retry of a held event
	defer wake.Stop()
	for {
		for s.retryDue() {
			if err := s.retry(ctx); err != nil {
				return ended(ctx, err)
			}
		}
		if len(s.held) >= cfg.MaxHeld { // read no further until some are settled
			if !outbound.Sleep(ctx, time.Until(s.retryAt)) {
				return nil
			}
			continue
		}
		if !in.ready() {
			var retry <-chan time.Time // nil: nothing held, nothing to retry
			if len(s.held) > 0 {
				wake.Reset(time.Until(s.retryAt))
				retry = wake.C
			}
			select {
			case c, ok := <-rd.out:
				if !ok { // the reader stopped: what it read is handled
					return ended(ctx, rd.err)
				}
				in.set(c)
			case <-retry:
				continue
			case <-ctx.Done():
				return nil
			}
			wake.Stop()
		}
		// What the reader has read already goes with it, up to a call's
		// worth of events.
		for in.ready() {
			if err := s.take(ctx, in.next()); err != nil {
				return ended(ctx, err)
			}
			if len(s.pending) >= cfg.BatchSize || len(s.held) >= cfg.MaxHeld {
				break
			}
		}
		if err := s.flush(ctx); err != nil {
			return ended(ctx, err)
		}
	}
}

// ended is what stream returns for err: nil once ctx is cancelled.
func ended(ctx context.Context, err error) error {
	select {
	case <-ctx.Done():
		return nil // the error is the cancellation's
	default:
		return err
	}
}
