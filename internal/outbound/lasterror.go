package outbound

import "strings"

// LastError is err as both relays record a failed publish (store.Failure.Err),
// stored as last_error on every database: NUL bytes (which PostgreSQL's text
// refuses) and invalid UTF-8 (which a text column may refuse) replaced by
// U+FFFD, and at most 2,000 bytes.
func LastError(err error) string {
	msg := strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", "\uFFFD"), "\uFFFD")
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "") + "..."
	}
	return msg
}
