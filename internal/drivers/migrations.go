package drivers

import (
	"io/fs"

	"github.com/heraldgo/herald/internal/store/postgres"
)

// PartitionedMigrations are PostgreSQL's migrations with the outbox
// partitioned by occurred_at (its 0001 replaced), for retention by partition
// drop: the one migration set no driver interface carries, since only
// PostgreSQL has it.
func PartitionedMigrations() fs.FS { return postgres.PartitionedMigrations() }
