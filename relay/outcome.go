package relay

import (
	"errors"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
)

// lastError is err as stored in last_error (outbound.LastError).
func lastError(err error) string { return outbound.LastError(err) }

// outcome is the result of publishing a batch.
type outcome struct {
	ok       []*row            // published
	failed   []failure         // not published, to be retried or dead
	ev       outbound.Evidence // what the batch's Publish calls showed
	took     time.Duration
	failedAt time.Time // the database's time of the failure marks (set by mark)
}

// failure is a row whose publish failed.
type failure struct {
	row    *row
	err    string // as stored in last_error
	cause  error  // the publish's error, for the retry policy
	poison bool   // the row cannot be published at all: dead at once
	// rejected: the broker answered and refused this message (ErrRejected):
	// the broker works, the failure is the message's own.
	rejected bool
	end      time.Time // when the failed Publish call returned (monotonic clock)
}

func (o *outcome) add(r *row, res result) {
	if res.err == nil {
		o.ok = append(o.ok, r)
		return
	}
	o.failed = append(o.failed, failure{row: r, err: lastError(res.err), cause: res.err, poison: errors.Is(res.err, ErrUndecodable),
		rejected: outbound.Refused(res.err), end: res.end})
}

// publishFailures reports whether a Publish call failed in the batch (rows
// that could not become messages are not publish failures, nor messages the
// broker answered and rejected: it works) and whether one of those failures
// was an event's first attempt.
func (o *outcome) publishFailures() (failed, first bool) {
	for _, f := range o.failed {
		if !f.poison && !f.rejected {
			failed = true
			first = first || f.row.Attempts == 0
		}
	}
	return failed, first
}
