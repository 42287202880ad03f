package events

// MetaDedupKey is the metadata key of an event's deduplication key: a key the
// application chooses for the business intent the event stands for ("refund
// order-42", a partner's request id), so that two events of one intent (a
// command retried after a timeout that wrote a second event, a partner resending
// with a new id) take effect once. The inbox deduplicates a message that carries
// it by (consumer, key) instead of (consumer, message id). The outbox hook sets
// it from [Deduplicated]; an application may also set it in the metadata it
// records an event with, which wins. Carried through the outbox, a key is
// metadata like any other: text without NUL bytes or line breaks (outboxhook
// refuses others; hash a binary key first).
const MetaDedupKey = "herald_dedup_key"

// Deduplicated is implemented by events that carry a deduplication key
// ([MetaDedupKey]), derived from the event: the same key for every event of
// one intent, a different key for different intents. An empty key is none:
// the event is deduplicated by its id alone.
type Deduplicated interface {
	DedupKey() string
}

// DedupMetadata returns the metadata that carries e's deduplication key
// ({MetaDedupKey: key}) when e is [Deduplicated] with a non-empty key, and
// nil otherwise.
func DedupMetadata(e Event) Metadata {
	d, ok := e.(Deduplicated)
	if !ok {
		return nil
	}
	if k := d.DedupKey(); k != "" {
		return Metadata{MetaDedupKey: k}
	}
	return nil
}
