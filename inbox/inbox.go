package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
	"github.com/heraldgo/herald/outboxhook"
)

// Errors the middleware returns (and, by default, nacks with).
var (
	// ErrMissingID is a message with neither a Herald event id nor a UUID.
	ErrMissingID = errors.New("inbox: message has no id")
	// ErrMalformedID is a message whose Herald event id metadata is not a UUID.
	ErrMalformedID = errors.New("inbox: message id is malformed")
	// ErrHandlerPanic is a handler that panicked; its transaction was rolled back.
	ErrHandlerPanic = errors.New("inbox: handler panicked")
)

// InvalidIDPolicy says what the middleware does with a message it cannot
// identify.
type InvalidIDPolicy int

const (
	// Nack returns ErrMissingID or ErrMalformedID, so the router nacks the
	// message (and its retry or poison-queue middleware, if any, takes over).
	Nack InvalidIDPolicy = iota
	// AckAndLog logs the message at error level and acknowledges it, unhandled.
	AckAndLog
)

// DefaultTable is the inbox table's default name, "inbox_messages".
const DefaultTable = store.DefaultInbox

// Config configures an Inbox. The zero value is ready to use.
type Config struct {
	// Table is the inbox table, optionally schema-qualified.
	// Defaults to "inbox_messages" (DefaultTable).
	Table string
	// Consumer names the consumer in the inbox key; by default each handler
	// deduplicates on its own. Defaults to the Watermill handler name.
	Consumer string
	// FormerConsumers maps a consumer's name to the names it had before (a
	// handler renamed, Consumer changed): a message recorded under a former
	// name is a duplicate for the consumer, found by a plain read that takes
	// no lock, and new rows are written under the current name. Keep a former
	// name listed until Retention has passed since the rename (see "Renaming a
	// consumer" in the package documentation). With Consumer set, its only key
	// is Consumer. Defaults to nil: no former names.
	FormerConsumers map[string][]string
	// InvalidID is what happens to a message with no usable id. Defaults to Nack.
	InvalidID InvalidIDPolicy
	// Retention is how long a processed message id is kept: longer than the
	// relay's retry horizon and the broker's redelivery window (see
	// "Retention" in the package documentation). Defaults to 24h.
	Retention time.Duration
	// RetryHorizon, when set, is the relay's retry horizon
	// (relay.Config.RetryHorizon()): New fails unless Retention exceeds it.
	// Defaults to 0: not checked.
	RetryHorizon time.Duration
	// CleanupInterval is how often Run deletes expired ids. Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatch is how many rows one cleanup DELETE removes.
	// Defaults to 1000.
	CleanupBatch int
	// DisableAutoCreate, when true, never creates the table (apply the
	// migrations of package migrations); when false, New creates it when
	// missing and leaves it alone when present. Defaults to false.
	DisableAutoCreate bool
	// DisableLegacyKeys, when true, stops looking a message up under the
	// keys earlier versions stored it under (see "Keys" in the package
	// documentation): set it once Retention has passed since the last
	// instance of an earlier version stopped and the cleaner has run since.
	// When false, a message whose key is stored in a form an earlier version
	// did not use (a long id, one ending in a space or beginning with
	// "sha256:") is also looked up under those earlier keys, by a plain read
	// that takes no lock. Defaults to false.
	DisableLegacyKeys bool
	// Logger receives the inbox's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the consumer span each message is handled in,
	// parented to the producer span the message carries (see "Tracing" in the
	// package documentation). Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MessagingSystem is the messaging.system attribute of the consumer spans
	// ("nats", "rabbitmq", ...). Defaults to empty: left out.
	MessagingSystem string
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.CleanupInterval == 0 {
		c.CleanupInterval = time.Minute
	}
	if c.CleanupBatch == 0 {
		c.CleanupBatch = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ErrRetentionTooShort is returned by Validate when Retention does not exceed
// RetryHorizon.
var ErrRetentionTooShort = errors.New("inbox: retention does not outlast the relay's retry horizon")

// Validate reports what is wrong with c after defaults are applied.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

// parse applies c's defaults, checks c and returns its Table parsed: New
// calls it and keeps the table; Validate calls it on a copy.
func (c *Config) parse() (ident.Table, error) {
	c.setDefaults()
	var errs []error
	table, err := ident.ParseTable(c.Table)
	if err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if c.Retention < 0 || c.CleanupInterval < 0 || c.CleanupBatch < 0 {
		errs = append(errs, errors.New("negative Retention, CleanupInterval or CleanupBatch"))
	}
	if c.InvalidID != Nack && c.InvalidID != AckAndLog {
		errs = append(errs, fmt.Errorf("InvalidID %d is not Nack or AckAndLog", c.InvalidID))
	}
	for name, former := range c.FormerConsumers {
		if name == "" {
			errs = append(errs, errors.New("FormerConsumers has an empty consumer name"))
		} else if c.Consumer != "" && name != c.Consumer {
			errs = append(errs, fmt.Errorf("FormerConsumers names consumer %q, but Consumer is %q", name, c.Consumer))
		}
		for _, f := range former {
			if f == "" || f == name {
				errs = append(errs, fmt.Errorf("FormerConsumers[%q] lists %q: a former name is another, non-empty name", name, f))
			}
		}
	}
	if c.RetryHorizon > 0 && c.Retention <= c.RetryHorizon {
		errs = append(errs, fmt.Errorf("%w: %v <= %v", ErrRetentionTooShort, c.Retention, c.RetryHorizon))
	}
	if err := errors.Join(errs...); err != nil {
		return ident.Table{}, fmt.Errorf("inbox: invalid config: %w", err)
	}
	return table, nil
}

// Inbox deduplicates messages for Watermill handlers in their own transactions.
type Inbox struct {
	db     *gorm.DB
	cfg    Config
	table  ident.Table
	store  store.Inbox // the inbox table in the database's implementation
	tracer trace.Tracer
	sqlDB  *sql.DB
	log    *slog.Logger
}

// New checks cfg and, on SQLite, the connection's settings
// (ErrSQLiteSettings), creates the inbox table when missing (unless
// DisableAutoCreate), checks that an existing one has what every migration
// makes (ErrSchemaOutdated) and returns the inbox.
func New(db *gorm.DB, cfg Config) (*Inbox, error) {
	table, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("inbox: db is required")
	}
	conn, err := drivers.Open(db, "") // the table is parsed
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if err := drivers.CheckConn(db); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	in := &Inbox{db: db, cfg: cfg, table: table, sqlDB: conn.DB, store: conn.Driver.Inbox(table),
		tracer: telemetry.Tracer(cfg.TracerProvider), log: cfg.Logger.With("component", "herald.inbox")}
	if !cfg.DisableAutoCreate {
		if err := in.ensureTable(context.Background()); err != nil {
			return nil, err
		}
	}
	if err := in.checkTable(context.Background()); err != nil {
		return nil, err
	}
	in.checkRenames(context.Background())
	return in, nil
}

// Middleware is New for router.AddMiddleware: it panics if cfg is invalid or
// the table cannot be created, at start-up. It runs no cleaner: use New and Run,
// or call Cleanup, for retention.
func Middleware(db *gorm.DB, cfg Config) message.HandlerMiddleware {
	in, err := New(db, cfg)
	if err != nil {
		panic(err)
	}
	return in.Middleware
}

type txKey struct{}

// Tx returns the transaction the inbox opened for the message whose context
// ctx is (msg.Context()), or nil outside the inbox middleware.
func Tx(ctx context.Context) *gorm.DB {
	tx, _ := ctx.Value(txKey{}).(*gorm.DB)
	return tx
}

type afterKey struct{}

// AfterCommit registers fn to run once the inbox's transaction for the
// message whose context ctx is (msg.Context()) has committed: when what the
// handler wrote is visible to everyone, before the message is acknowledged.
// Use it for what must not happen if the handler's writes roll back, or
// before they are visible: a signal to another goroutine, a cache
// invalidation. A rollback, a failed commit or a duplicate delivery runs
// none. Functions run in the order registered, on the handler's goroutine.
// Outside the inbox middleware AfterCommit does nothing and returns false.
func AfterCommit(ctx context.Context, fn func()) bool {
	after, ok := ctx.Value(afterKey{}).(*[]func())
	if ok {
		*after = append(*after, fn)
	}
	return ok
}

// errDuplicate ends the transaction of a duplicate delivery.
var errDuplicate = errors.New("inbox: duplicate")

// Middleware wraps h: see the package documentation.
func (in *Inbox) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		consumer := in.cfg.Consumer
		if consumer == "" {
			consumer = message.HandlerNameFromCtx(msg.Context())
		}
		id, err := messageID(msg)
		if err != nil {
			if in.cfg.InvalidID == AckAndLog {
				in.log.Error("message acked unhandled: no usable id", "err", err, "consumer", consumer, "metadata", msg.Metadata)
				return nil, nil
			}
			return nil, err
		}
		// The row's second half: the message's deduplication key, in its
		// namespace, when it carries one; else its id.
		dedupKey := msg.Metadata.Get(events.MetaDedupKey)
		row := storedKey(id)
		if dedupKey != "" {
			row = intentKey(dedupKey)
		}
		outer := msg.Context()
		defer msg.SetContext(outer)
		// The handler runs in a consumer span parented to the producer span the
		// message carries; its writes (and the events they record) are in it.
		sctx, span := telemetry.StartProcess(telemetry.Extract(outer, msg.Metadata), in.tracer, in.cfg.MessagingSystem,
			message.SubscribeTopicFromCtx(outer), id, consumer)
		duplicate := false
		defer func() { span.SetAttributes(attribute.Bool("herald.duplicate", duplicate)); telemetry.End(span, err) }()
		var after []func()
		err = in.db.WithContext(sctx).Transaction(func(tx *gorm.DB) error {
			ctx, x := tx.Statement.Context, tx.Statement.ConnPool
			seen, err := in.seenElsewhere(ctx, x, consumer, id, dedupKey)
			if err != nil {
				return fmt.Errorf("inbox: look up %s for %s: %w", id, consumer, err)
			}
			if seen {
				return errDuplicate
			}
			fresh, err := in.store.Insert(ctx, x, storedKey(consumer), row)
			if err != nil {
				return fmt.Errorf("inbox: record %s for %s: %w", id, consumer, err)
			}
			if !fresh {
				return errDuplicate
			}
			msg.SetContext(context.WithValue(context.WithValue(sctx, txKey{}, tx), afterKey{}, &after))
			produced, err := call(h, msg)
			if err != nil {
				return err
			}
			if len(produced) > 0 {
				return outboxhook.AddMessages(tx, message.PublishTopicFromCtx(outer), produced...)
			}
			return nil
		})
		if errors.Is(err, errDuplicate) {
			duplicate, err = true, nil
		} else if err == nil {
			for _, fn := range after {
				fn()
			}
		}
		return nil, err
	}
}

// call runs the handler, turning a panic into an error.
func call(h message.HandlerFunc, msg *message.Message) (out []*message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		}
	}()
	return h(msg)
}

// MaxKeyBytes is the longest consumer name and message id the inbox stores
// as given: 255 bytes, what MySQL's and MariaDB's VARCHAR(255) key columns
// hold. A longer one, one that is not text every database stores (a NUL
// byte, invalid UTF-8), one that ends in a space (MySQL's and MariaDB's
// collation ignores trailing spaces, so it would equal another) or one that
// begins with "sha256:" or "#sha256:" (so that no key stored as given is a
// hashed one) is stored as "#sha256:" and the hex SHA-256 of its bytes,
// alike on every database: any message id deduplicates, and two ids are one
// key only if they are equal.
const MaxKeyBytes = 255

// hashPrefix begins the key the inbox stores for a consumer name or message
// id it does not store as given ([MaxKeyBytes]), before the hex SHA-256.
const hashPrefix = "#sha256:"

// legacyHashPrefix began the hashed keys of earlier versions; an id given
// with it was stored as given then.
const legacyHashPrefix = "sha256:"

// storedKey is the inbox key column's value for s ([MaxKeyBytes]).
func storedKey(s string) string {
	if asGiven(s) && !strings.HasSuffix(s, " ") && !strings.HasPrefix(s, hashPrefix) && !strings.HasPrefix(s, legacyHashPrefix) {
		return s
	}
	return hashed(hashPrefix, s)
}

// asGiven reports whether earlier versions stored s as given: no longer than
// MaxKeyBytes, valid UTF-8 without NUL.
func asGiven(s string) bool {
	return len(s) <= MaxKeyBytes && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

func hashed(prefix, s string) string {
	sum := sha256.Sum256([]byte(s))
	return prefix + hex.EncodeToString(sum[:])
}

// intentPrefix begins the key the inbox stores for a message's
// deduplication key (events.MetaDedupKey), before the hex SHA-256 of its
// bytes: always hashed, so any length and bytes are stored alike everywhere.
// It begins with hashPrefix, which storedKey never leaves at the start of a
// key stored as given, and a hashed id is hashPrefix and exactly 64 hex
// digits: no message id is ever stored as a deduplication key.
const intentPrefix = hashPrefix + "key:"

// intentKey is the inbox key column's value for the deduplication key k.
func intentKey(k string) string { return hashed(intentPrefix, k) }

// legacyKeys returns the keys earlier versions may have stored (consumer,
// id) under when today's differs: as given (before long keys were hashed),
// and with the long ones hashed under legacyHashPrefix and the rest as given.
func legacyKeys(consumer, id string) [][2]string {
	now := [2]string{storedKey(consumer), storedKey(id)}
	if now == [2]string{consumer, id} {
		return nil
	}
	earlier := func(s string) string {
		if asGiven(s) {
			return s
		}
		return hashed(legacyHashPrefix, s)
	}
	var out [][2]string
	for _, k := range [][2]string{{consumer, id}, {earlier(consumer), earlier(id)}} {
		// A key of today's hashed form is today's: an earlier row of that
		// form cannot be told from it.
		// Nor is an id of a deduplication key's form: that row is a key's.
		if k != now && (len(out) == 0 || out[0] != k) && !isHashed(k[0]) && !isHashed(k[1]) &&
			!strings.HasPrefix(k[1], intentPrefix) {
			out = append(out, k)
		}
	}
	return out
}

// isHashed reports whether s has the form of a key storedKey hashed.
func isHashed(s string) bool {
	rest, ok := strings.CutPrefix(s, hashPrefix)
	if !ok || len(rest) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// lookups returns the keys other than the one its insert writes under which
// a message of consumer with id and deduplication key dedupKey (empty for
// none) counts as recorded: under each former name of consumer, the key its
// insert writes; unless DisableLegacyKeys, under consumer and each former
// name, the keys earlier versions stored the message under (for a message
// with a deduplication key, its id: earlier versions deduplicated by id
// alone). None for a UUID without a deduplication key or former names.
func (in *Inbox) lookups(consumer, id, dedupKey string) [][2]string {
	names := append([]string{consumer}, in.cfg.FormerConsumers[consumer]...)
	var out [][2]string
	add := func(k [2]string) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for i, name := range names {
		if i > 0 {
			if dedupKey != "" {
				add([2]string{storedKey(name), intentKey(dedupKey)})
			} else {
				add([2]string{storedKey(name), storedKey(id)})
			}
		}
		if in.cfg.DisableLegacyKeys {
			continue
		}
		if dedupKey != "" {
			add([2]string{storedKey(name), storedKey(id)})
		}
		for _, k := range legacyKeys(name, id) {
			add(k)
		}
	}
	return out
}

// seenElsewhere reports whether the message is recorded under one of its
// lookups keys, by plain reads that take no lock.
func (in *Inbox) seenElsewhere(ctx context.Context, x store.Execer, consumer, id, dedupKey string) (bool, error) {
	for _, k := range in.lookups(consumer, id, dedupKey) {
		if seen, err := in.store.Recorded(ctx, x, k[0], k[1]); err != nil || seen {
			return seen, err
		}
	}
	return false, nil
}

// checkRenames logs, for each consumer FormerConsumers names, what one
// query over the table's primary key tells of its rename: a warning when
// the consumer has no rows under its name but has some under a former one
// (the rename is recent: redeliveries depend on those names staying listed),
// or has none under any of its names (a former name misspelled?), and a note
// when no former name has rows left (they may go). It only logs: a failure
// is logged too.
func (in *Inbox) checkRenames(ctx context.Context) {
	if len(in.cfg.FormerConsumers) == 0 {
		return
	}
	consumers := slices.Sorted(maps.Keys(in.cfg.FormerConsumers))
	var names []string
	for _, name := range consumers {
		names = append(names, storedKey(name))
		for _, f := range in.cfg.FormerConsumers[name] {
			names = append(names, storedKey(f))
		}
	}
	has, err := in.store.Consumers(ctx, in.sqlDB, names)
	if err != nil {
		in.log.Warn("inbox: cannot look up the rows of renamed consumers", "err", err)
		return
	}
	i := 0
	for _, name := range consumers {
		former := in.cfg.FormerConsumers[name]
		current := has[i]
		var left []string
		for j, f := range former {
			if has[i+1+j] {
				left = append(left, f)
			}
		}
		i += 1 + len(former)
		switch {
		case !current && len(left) > 0:
			in.log.Warn("inbox: consumer has no rows under its name, but has some under former names: "+
				"messages recorded under them count as duplicates while they stay in FormerConsumers, "+
				"which they must until Retention has passed", "consumer", name, "former", left, "retention", in.cfg.Retention)
		case !current:
			in.log.Warn("inbox: neither the consumer nor its former names have rows: "+
				"check that FormerConsumers spells the names the consumer had", "consumer", name, "former", former)
		case len(left) == 0:
			in.log.Info("inbox: no rows are left under the consumer's former names: "+
				"they can be removed from FormerConsumers", "consumer", name, "former", former)
		}
	}
}

// messageID is the Herald event id metadata key, which must be a UUID, or
// else the message UUID, which must not be empty.
func messageID(msg *message.Message) (string, error) {
	if raw := msg.Metadata.Get(events.MetaID); raw != "" {
		if _, err := uuid.Parse(raw); err != nil {
			return "", fmt.Errorf("%w: %s %q: %w", ErrMalformedID, events.MetaID, raw, err)
		}
		return raw, nil
	}
	if strings.TrimSpace(msg.UUID) == "" {
		return "", ErrMissingID
	}
	return msg.UUID, nil
}

// Run deletes expired ids every CleanupInterval until ctx is cancelled, then
// returns nil. Failures are logged and retried at the next interval.
func (in *Inbox) Run(ctx context.Context) error {
	t := time.NewTicker(in.cfg.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := in.Cleanup(ctx); err != nil && ctx.Err() == nil {
			in.log.Warn("inbox cleanup failed", "err", err)
		} else if n > 0 {
			in.log.Debug("inbox cleanup", "deleted", n)
		}
	}
}

// Cleanup deletes ids older than Retention now, in batches of CleanupBatch, on
// one instance at a time, and returns how many it deleted.
func (in *Inbox) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := in.store.Cleanup(ctx, in.sqlDB, in.cfg.Retention, in.cfg.CleanupBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("inbox: cleanup: %w", err)
		}
		if n < int64(in.cfg.CleanupBatch) {
			return total, nil
		}
	}
}
