package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// ErrBadGroupKey is returned (wrapped) for a group key (DeadGroup.Key) that
// is not one.
var ErrBadGroupKey = errors.New("not a dead group key")

// ErrNoAudit is returned (wrapped) when the driver cannot group dead events
// or keep the audit trail (none of Herald's three).
var ErrNoAudit = errors.New("the driver keeps no audit trail")

// scanPage is how many dead events one read of a group's scan returns.
const scanPage = 5000

// The pieces NormalizeError replaces, in this order.
var (
	timeRE = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}\b)?`)
	uuidRE = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	ipv4RE = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b`)
	// IPv6: bracketed (with a port or not), eight groups, or compressed
	// ("::" somewhere).
	ipv6RE = regexp.MustCompile(`(?i)\[[0-9a-z:.%_]*:[0-9a-z:.%_]*\](?::\d{1,5})?|\b(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}\b|(?:\b[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*\b)?`)
	hexRE  = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b`)
	// Long tokens of letters and digits (hex digests, ULIDs, base62 ids):
	// replaced when they mix letters and digits.
	tokenRE = regexp.MustCompile(`\b[0-9A-Za-z]{16,}\b`)
	// A number: not one ending a word ("s3", "utf8", "v2" stay).
	numberRE = regexp.MustCompile(`(^|[^0-9A-Za-z_])[0-9]+(?:[.,][0-9]+)*`)
	digitRE  = regexp.MustCompile(`[0-9]`)
	letterRE = regexp.MustCompile(`[A-Za-z]`)
	spacesRE = regexp.MustCompile(`\s+`)
)

// NormalizeError returns the error text s with what varies from one event to
// the next stripped, so that one cause of failure reads the same: timestamps
// (2026-12-06T08:26:39Z) become <time>, UUIDs
// <uuid>, IPv4 and IPv6 addresses (with a port or not) <ip>, 0x-prefixed hex
// <hex>, long tokens mixing letters and digits (digests, ULIDs, other ids)
// <id>, and numbers <n> (a digit ending a word, as in "s3" or "utf8", stays);
// runs of white space become one space. "timeout after 5s to 10.0.0.7:5672"
// and "timeout after 30s to 10.0.0.9:5672" both give "timeout after <n>s to
// <ip>". The dead groups (Outbox.DeadGroups) are by type and this.
func NormalizeError(s string) string {
	s = timeRE.ReplaceAllString(s, "<time>")
	s = uuidRE.ReplaceAllString(s, "<uuid>")
	s = ipv4RE.ReplaceAllString(s, "<ip>")
	s = ipv6RE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "::" {
			return m // a separator ("pkg::name"), not an address
		}
		return "<ip>"
	})
	s = hexRE.ReplaceAllString(s, "<hex>")
	s = tokenRE.ReplaceAllStringFunc(s, func(m string) string {
		if digitRE.MatchString(m) && letterRE.MatchString(m) {
			return "<id>"
		}
		return m
	})
	s = numberRE.ReplaceAllStringFunc(s, func(m string) string {
		if m != "" && (m[0] < '0' || m[0] > '9') {
			return m[:1] + "<n>"
		}
		return "<n>"
	})
	return strings.TrimSpace(spacesRE.ReplaceAllString(s, " "))
}

// DeadGroupKey names a group of dead events for an action: its type, its
// normalised error (NormalizeError) and the latest death it covers. An action
// on a key changes only the events that died by Until: the events a second
// identical action finds are gone (requeued or purged), and an event that
// died again since is not taken, so a double click acts once.
type DeadGroupKey struct {
	Type  string
	Error string
	// Until is the latest death the group covers (DeadGroup.LastSeen, to
	// the microsecond, by the database's clock).
	Until time.Time
}

// keyJSON is a DeadGroupKey in its token.
type keyJSON struct {
	Type  string `json:"t"`
	Error string `json:"e"`
	Until int64  `json:"u"` // microseconds since the epoch
}

// String is the key as one token (DeadGroup.Key), which ParseDeadGroupKey
// reads back: for the command line and the page's forms.
func (k DeadGroupKey) String() string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<n>" as it is: a shorter key
	_ = enc.Encode(keyJSON{Type: k.Type, Error: k.Error, Until: k.Until.UnixMicro()})
	return "g1." + base64.RawURLEncoding.EncodeToString(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// ParseDeadGroupKey reads a key String wrote, or returns an error wrapping
// ErrBadGroupKey.
func ParseDeadGroupKey(s string) (DeadGroupKey, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "g1.")
	if !ok {
		return DeadGroupKey{}, fmt.Errorf("admin: %w: %q", ErrBadGroupKey, s)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return DeadGroupKey{}, fmt.Errorf("admin: %w: %q: %w", ErrBadGroupKey, s, err)
	}
	var k keyJSON
	if err := json.Unmarshal(b, &k); err != nil {
		return DeadGroupKey{}, fmt.Errorf("admin: %w: %q: %w", ErrBadGroupKey, s, err)
	}
	if k.Type == "" || k.Until <= 0 {
		return DeadGroupKey{}, fmt.Errorf("admin: %w: %q: no type or bound", ErrBadGroupKey, s)
	}
	return DeadGroupKey{Type: k.Type, Error: k.Error, Until: time.UnixMicro(k.Until).UTC()}, nil
}

// DeadGroup is the dead events of one type whose last errors normalise to the
// same text (NormalizeError): one cause of death.
type DeadGroup struct {
	// Key names the group for RequeueGroup and PurgeGroup (a
	// DeadGroupKey's String), bounded by LastSeen.
	Key   string `json:"key"`
	Type  string `json:"type"`
	Error string `json:"error"`
	// Sample is the last error of the group's latest death, as stored.
	Sample string `json:"sample"`
	// Events counts the group's events.
	Events int64 `json:"events"`
	// FirstSeen and LastSeen are the first and latest deaths (UTC, the
	// database's clock).
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// DeadGroups is the dead events grouped.
type DeadGroups struct {
	// Groups are the groups, the largest first (then by type and error).
	Groups []DeadGroup `json:"groups"`
	// Scanned counts the dead events read; Truncated is true when there
	// were more than Config.DeadGroupScan, of which the groups cover the
	// oldest Scanned.
	Scanned   int64 `json:"scanned"`
	Truncated bool  `json:"truncated"`
	// More counts the groups past the limit asked for.
	More int `json:"more"`
}

// DeadGroups groups the dead events by type and normalised last error
// (NormalizeError) and returns up to limit groups (all when limit <= 0), the
// largest first, with how many events each holds, their first and latest
// deaths and a sample error. It reads up to Config.DeadGroupScan dead events,
// oldest death first, through the dead index, without their payloads, and
// groups them here: no column of the outbox stores the normalised error, so
// neither the write path nor the relay pays for it, and 10,000 dead events
// take one read of a few milliseconds.
func (o *Outbox) DeadGroups(ctx context.Context, limit int) (DeadGroups, error) {
	ga, err := o.groupAdmin()
	if err != nil {
		return DeadGroups{}, err
	}
	type acc struct {
		g           DeadGroup
		first, last int64
	}
	byKey := map[[2]string]*acc{}
	out := DeadGroups{Groups: []DeadGroup{}}
	s := store.DeadScan{Limit: min(scanPage, o.cfg.DeadGroupScan+1)}
	for {
		page, err := ga.ScanDead(ctx, o.db, s)
		if err != nil {
			return DeadGroups{}, fmt.Errorf("admin: group dead events: %w", err)
		}
		for _, b := range page {
			if out.Scanned == int64(o.cfg.DeadGroupScan) {
				out.Truncated = true
				break
			}
			out.Scanned++
			norm := NormalizeError(b.LastError)
			a := byKey[[2]string{b.Type, norm}]
			if a == nil {
				a = &acc{g: DeadGroup{Type: b.Type, Error: norm}, first: b.DeadAt}
				byKey[[2]string{b.Type, norm}] = a
			}
			a.g.Events++
			if b.DeadAt >= a.last {
				a.last, a.g.Sample = b.DeadAt, b.LastError
			}
		}
		if out.Truncated || len(page) < s.Limit {
			break
		}
		last := page[len(page)-1]
		s.AfterDeadAt, s.AfterSeq = last.DeadAt, last.Seq
	}
	for _, a := range byKey {
		a.g.FirstSeen, a.g.LastSeen = time.UnixMicro(a.first).UTC(), time.UnixMicro(a.last).UTC()
		a.g.Key = DeadGroupKey{Type: a.g.Type, Error: a.g.Error, Until: a.g.LastSeen}.String()
		out.Groups = append(out.Groups, a.g)
	}
	sort.Slice(out.Groups, func(i, j int) bool {
		a, b := out.Groups[i], out.Groups[j]
		if a.Events != b.Events {
			return a.Events > b.Events
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Error < b.Error
	})
	if limit > 0 && len(out.Groups) > limit {
		out.More = len(out.Groups) - limit
		out.Groups = out.Groups[:limit]
	}
	return out, nil
}

// GroupAction says how RequeueGroup and PurgeGroup act.
type GroupAction struct {
	// DryRun: count the events the action would change, change nothing and
	// record nothing. Defaults to false.
	DryRun bool
	// By names who acts, for the audit trail (an operator's name, "cli
	// alice@host"). Defaults to empty: recorded as "unknown".
	By string
	// OlderThan: only the group's events that died more than this long ago
	// (by the database's clock), when > 0; the younger ones are kept. For a
	// purge with a retention. Defaults to 0: all of them.
	OlderThan time.Duration
}

// GroupResult is what an action on a group did (or, in a dry run, would do).
type GroupResult struct {
	// Action is "requeue-group" or "purge-group".
	Action string `json:"action"`
	// Type, Error and Until are the group's key.
	Type  string    `json:"type"`
	Error string    `json:"error"`
	Until time.Time `json:"until"`
	// Events counts the events changed (in a dry run: that would be).
	Events int64 `json:"events"`
	// DryRun is true when nothing was changed.
	DryRun bool `json:"dry_run"`
}

// Audit actions.
const (
	actionRequeueGroup = "requeue-group"
	actionPurgeGroup   = "purge-group"
)

// RequeueGroup makes the dead events of group k pending again (as Requeue):
// those of type k.Type that died by k.Until, are still dead, and whose last
// error normalises to k.Error (and, with a.OlderThan, died more than that long
// ago). They are requeued in one transaction, a statement per thousand
// events, keeping their places in the order: an ordered relay publishes each
// aggregate's requeued events in their order. A second identical call finds
// none (0, no error). Unless a.DryRun, it records the action in the audit
// trail (Audit) and wakes the relays.
func (o *Outbox) RequeueGroup(ctx context.Context, k DeadGroupKey, a GroupAction) (GroupResult, error) {
	return o.actOnGroup(ctx, store.ActRequeue, actionRequeueGroup, k, a)
}

// PurgeGroup deletes the dead events of group k (as RequeueGroup picks them),
// a statement per thousand events, and records the action in the audit trail
// unless a.DryRun. With a.OlderThan it keeps the group's events that died
// more recently (a retention).
func (o *Outbox) PurgeGroup(ctx context.Context, k DeadGroupKey, a GroupAction) (GroupResult, error) {
	return o.actOnGroup(ctx, store.ActPurge, actionPurgeGroup, k, a)
}

func (o *Outbox) actOnGroup(ctx context.Context, act store.DeadAction, name string, k DeadGroupKey, a GroupAction) (GroupResult, error) {
	res := GroupResult{Action: name, Type: k.Type, Error: k.Error, Until: k.Until.UTC(), DryRun: a.DryRun}
	if k.Type == "" || k.Until.IsZero() {
		return res, fmt.Errorf("admin: %s: %w: no type or bound", name, ErrBadGroupKey)
	}
	if a.OlderThan < 0 {
		return res, fmt.Errorf("admin: %s: negative age %s", name, a.OlderThan)
	}
	ga, err := o.groupAdmin()
	if err != nil {
		return res, err
	}
	until := k.Until.UnixMicro()
	var members []store.DeadBrief
	s := store.DeadScan{Type: k.Type, UpTo: until, OlderThan: a.OlderThan, Limit: scanPage}
	for {
		page, err := ga.ScanDead(ctx, o.db, s)
		if err != nil {
			return res, fmt.Errorf("admin: %s: %w", name, err)
		}
		for _, b := range page {
			if NormalizeError(b.LastError) == k.Error {
				members = append(members, b)
			}
		}
		if len(page) < s.Limit {
			break
		}
		last := page[len(page)-1]
		s.AfterDeadAt, s.AfterSeq = last.DeadAt, last.Seq
	}
	if a.DryRun {
		res.Events = int64(len(members))
		return res, nil
	}
	// The audit table first: an action the trail could not record is not
	// done.
	if err := ga.CreateAudit(ctx, o.db); err != nil {
		return res, fmt.Errorf("admin: %s: create the audit table: %w", name, err)
	}
	n, err := ga.ActDead(ctx, o.db, act, members, until)
	res.Events = n
	if err != nil {
		return res, fmt.Errorf("admin: %s: %w", name, err)
	}
	by := a.By
	if by == "" {
		by = "unknown"
	}
	detail := fmt.Sprintf("type=%s error=%s until=%s", strconv.Quote(k.Type), strconv.Quote(k.Error), res.Until.Format(time.RFC3339Nano))
	if a.OlderThan > 0 {
		detail += " older_than=" + a.OlderThan.String()
	}
	o.log.Info("admin: "+name, "by", by, "type", k.Type, "error", k.Error, "until", res.Until, "older_than", a.OlderThan, "events", n)
	if err := ga.AddAudit(ctx, o.db, store.AuditEntry{By: by, Action: name, Detail: detail, Events: n}); err != nil {
		return res, fmt.Errorf("admin: %s: done (%d events) but not recorded in the audit trail: %w", name, n, err)
	}
	if act == store.ActRequeue && n > 0 {
		o.wake(ctx)
	}
	return res, nil
}

// AuditEntry is one record of the audit trail: a bulk action on dead events.
type AuditEntry struct {
	// At is when it was done (UTC, the database's clock).
	At time.Time `json:"at"`
	// By is who did it, as the caller named them (GroupAction.By).
	By string `json:"by"`
	// Action is "requeue-group" or "purge-group".
	Action string `json:"action"`
	// Detail names the group: type, normalised error, bound and, for a
	// purge with a retention, older_than.
	Detail string `json:"detail"`
	// Events counts the events it changed.
	Events int64 `json:"events"`
}

// Audit returns up to limit records of the audit trail (the outbox table's
// _audit table, which the first group action creates, or herald migrate up),
// the newest first; none when no action was ever recorded.
func (o *Outbox) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	ga, err := o.groupAdmin()
	if err != nil {
		return nil, err
	}
	es, err := ga.FindAudit(ctx, o.db, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: read the audit trail: %w", err)
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{At: e.At.UTC(), By: e.By, Action: e.Action, Detail: e.Detail, Events: e.Events}
	}
	return out, nil
}

func (o *Outbox) groupAdmin() (store.DeadGroupAdmin, error) {
	ga, ok := o.adm.(store.DeadGroupAdmin)
	if !ok {
		return nil, fmt.Errorf("admin: %w (%s)", ErrNoAudit, o.drv.Name())
	}
	return ga, nil
}
