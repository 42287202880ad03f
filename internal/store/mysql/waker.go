package mysql

import (
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Waker returns sqlkit.NoWaker: MySQL has no LISTEN/NOTIFY. Relays in other
// processes find events by polling (Config.PollInterval); within one process,
// Notify is a relay's Wake.
func (Driver) Waker() store.Waker { return sqlkit.NoWaker{} }
