package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/google/uuid"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// benchDB is what the benchmarks need of a database: a scratch database, how
// to open it, the raw-SQL references, and watermill-sql's adapters for it.
type benchDB struct {
	name string
	// scratch makes a database of the run's own and returns its DSN and the
	// function that drops it.
	scratch func() (dsn string, drop func(), err error)
	// open opens GORM on dsn with a pool that keeps its connections.
	open func(dsn string) (*gorm.DB, error)
	// rawInsert and rawOutboxInsert are the write benchmark's raw-SQL pair:
	// the business INSERT, and the outbox INSERT a hand-written outbox adds.
	rawInsert, rawOutboxInsert string
	// rawOutboxArgs are the outbox INSERT's arguments for an order.
	rawOutboxArgs func(id string, payload []byte) []any
	// claimDelete is the burn-down's physical reference: claim up to 1000 due
	// events, read them, delete them, in one transaction; it returns how many.
	claimDelete func(db *sql.DB) (int, error)
	// claimDeleteRC is the same at READ COMMITTED, the relay's isolation on
	// MySQL (nil where the reference's isolation already is the relay's).
	claimDeleteRC func(db *sql.DB) (int, error)
	// forwarder returns watermill-sql's schema and offsets adapters (default
	// or fastest) and the database/sql driver name, or nil without one.
	forwarder func(fastest bool) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter, string)
}

var benchDBs = map[string]benchDB{"postgres": postgresBench, "sqlite": sqliteBench, "mysql": mysqlBench}

func pickDB(name string) (benchDB, error) {
	d, ok := benchDBs[name]
	if !ok {
		return benchDB{}, fmt.Errorf("unknown -db %q: postgres, sqlite or mysql", name)
	}
	return d, nil
}

var postgresBench = benchDB{
	name: "postgres",
	scratch: func() (string, func(), error) {
		admin, err := sql.Open("pgx", pgtest.DSN())
		if err != nil {
			return "", nil, err
		}
		dsn, drop, err := scratchSchema(admin)
		if err != nil {
			_ = admin.Close()
			return "", nil, err
		}
		return dsn, func() { drop(); _ = admin.Close() }, nil
	},
	open:            pgtest.OpenPool,
	rawInsert:       `INSERT INTO orders (id, status, amount) VALUES ($1, $2, $3)`,
	rawOutboxInsert: `INSERT INTO outbox_messages (id, type, aggregate_type, aggregate_id, topic, payload, occurred_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
	rawOutboxArgs: func(id string, payload []byte) []any {
		return []any{events.NewID(), "order.placed", "Order", id, "order.placed", payload, time.Now()}
	},
	claimDelete: func(db *sql.DB) (int, error) {
		// = ANY(ARRAY(...)), not IN (...): on an analyzed outbox the planner
		// made IN a hash semi-join over a sequential scan of the whole table,
		// every batch (20 ms a batch of 1,000 at 100,000 rows, 4 ms this way).
		return scanClaimed(db.Query(`DELETE FROM outbox_messages WHERE id = ANY(ARRAY(
	SELECT id FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL AND available_at <= now()
	ORDER BY available_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED))
	RETURNING id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts`))
	},
	forwarder: func(fastest bool) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter, string) {
		if fastest {
			return wmsql.PostgreSQLQueueSchema{SubscribeBatchSize: 1000}, wmsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}, "pgx"
		}
		return wmsql.DefaultPostgreSQLSchema{}, wmsql.DefaultPostgreSQLOffsetsAdapter{}, "pgx"
	},
}

var sqliteBench = benchDB{
	name: "sqlite",
	scratch: func() (string, func(), error) {
		dir, err := os.MkdirTemp("", "herald-bench-")
		if err != nil {
			return "", nil, err
		}
		return testkit.SQLiteDSN(filepath.Join(dir, "bench.db")), func() { _ = os.RemoveAll(dir) }, nil
	},
	open: func(dsn string) (*gorm.DB, error) {
		return testkit.OpenSQLite(dsn, &gorm.Config{Logger: logger.Discard})
	},
	rawInsert: `INSERT INTO orders (id, status, amount) VALUES (?, ?, ?)`,
	rawOutboxInsert: `INSERT INTO outbox_messages (id, type, aggregate_type, aggregate_id, part_key, topic, payload, occurred_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
	rawOutboxArgs: func(id string, payload []byte) []any {
		return []any{events.NewID().String(), "order.placed", "Order", id, 0, "order.placed", string(payload), time.Now().UnixMicro()}
	},
	claimDelete: func(db *sql.DB) (int, error) {
		return scanClaimedInts(db.Query(`DELETE FROM outbox_messages WHERE seq IN (
	SELECT seq FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL
	  AND available_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER)
	ORDER BY available_at, seq LIMIT 1000)
	RETURNING id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts`))
	},
}

var mysqlBench = benchDB{
	name: "mysql",
	scratch: func() (string, func(), error) {
		admin, err := sql.Open("mysql", testkit.MySQLDSN(testkit.MySQLServer(), ""))
		if err != nil {
			return "", nil, err
		}
		name := pgtest.Name("herald_bench_")
		if _, err := admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			_ = admin.Close()
			return "", nil, fmt.Errorf("create database: %w", err)
		}
		return testkit.MySQLDSN(testkit.MySQLServer(), name), func() {
			_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
			_ = admin.Close()
		}, nil
	},
	open: func(dsn string) (*gorm.DB, error) {
		db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, err
		}
		s, err := db.DB()
		if err != nil {
			return nil, err
		}
		s.SetMaxIdleConns(64)
		return db, nil
	},
	rawInsert: `INSERT INTO orders (id, status, amount) VALUES (?, ?, ?)`,
	rawOutboxInsert: `INSERT INTO outbox_messages (id, type, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at)
	VALUES (?, ?, ?, ?, ?, ?, '{}', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`,
	rawOutboxArgs: func(id string, payload []byte) []any {
		return []any{events.NewID().String(), "order.placed", "Order", id, "order.placed", string(payload), time.Now().UTC()}
	},
	claimDelete:   func(db *sql.DB) (int, error) { return mysqlClaimDelete(db, sql.LevelDefault) },
	claimDeleteRC: func(db *sql.DB) (int, error) { return mysqlClaimDelete(db, sql.LevelReadCommitted) },
	forwarder: func(fastest bool) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter, string) {
		if fastest {
			return wmsql.MySQLQueueSchema{SubscribeBatchSize: 1000}, wmsql.MySQLQueueOffsetsAdapter{DeleteOnAck: true}, "mysql"
		}
		return wmsql.DefaultMySQLSchema{}, wmsql.DefaultMySQLOffsetsAdapter{}, "mysql"
	},
}

// mysqlReferenceClaim is the claim of MySQL's reference: the first 1,000
// due rows, locked.
const mysqlReferenceClaim = `SELECT seq, id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts
	FROM outbox_messages WHERE dead_at IS NULL AND processed_at IS NULL AND available_at <= UTC_TIMESTAMP(6)
	ORDER BY available_at, seq LIMIT 1000 FOR UPDATE SKIP LOCKED`

// mysqlReferenceDelete is the DELETE of MySQL's reference, of n seqs.
func mysqlReferenceDelete(n int) string {
	return `DELETE FROM outbox_messages WHERE seq IN (` + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + `)`
}

// mysqlClaimDelete is MySQL's reference at isolation iso (LevelDefault: the
// server's, REPEATABLE READ). MySQL has no RETURNING: the claim reads what it
// locks, then deletes it by its primary key.
func mysqlClaimDelete(db *sql.DB, iso sql.IsolationLevel) (int, error) {
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: iso})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.Query(mysqlReferenceClaim)
	if err != nil {
		return 0, err
	}
	var seqs []any
	for rows.Next() {
		var (
			id, typ, aggType, aggID, topic string
			seq                            int64
			version, attempts              int
			payload, md, occurred          []byte
		)
		if err := rows.Scan(&seq, &id, &typ, &version, &aggType, &aggID, &topic, &payload, &md, &occurred, &attempts); err != nil {
			_ = rows.Close()
			return 0, err
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, tx.Commit()
	}
	if _, err := tx.Exec(mysqlReferenceDelete(len(seqs)), seqs...); err != nil {
		return 0, err
	}
	return len(seqs), tx.Commit()
}

// scanClaimed reads the rows a claim returned (what a relay must read) and
// counts them.
func scanClaimed(rows *sql.Rows, err error) (int, error) { return scanClaimedAs[time.Time](rows, err) }

// scanClaimedInts is scanClaimed for SQLite's integer times.
func scanClaimedInts(rows *sql.Rows, err error) (int, error) { return scanClaimedAs[int64](rows, err) }

// scanClaimedAs is scanClaimed with occurred_at read as a T.
func scanClaimedAs[T any](rows *sql.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			id, typ, aggType, aggID, topic string
			version, attempts              int
			payload, md                    []byte
			occurred                       T
		)
		if err := rows.Scan(&id, &typ, &version, &aggType, &aggID, &topic, &payload, &md, &occurred, &attempts); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// addBacklog writes n events over 1000 aggregates through
// outboxhook.AddMessages (to the outbox of the plugin db uses), in
// transactions of 1000.
func addBacklog(db *gorm.DB, n int, topic string) error {
	for i := 0; i < n; i += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			m := message.NewMessage(uuid.NewString(), []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, j, strings.Repeat("x", 100))))
			m.Metadata.Set(events.MetaType, "bench.event")
			m.Metadata.Set(events.MetaAggregateType, "Bench")
			m.Metadata.Set(events.MetaAggregateID, fmt.Sprintf("agg-%d", j%1000))
			msgs = append(msgs, m)
		}
		if err := db.Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, topic, msgs...) }); err != nil {
			return err
		}
	}
	return nil
}

// loadOutbox puts n pending events over 1000 aggregates into db's outbox (the
// table made by the hook), on PostgreSQL in one INSERT ... SELECT, elsewhere
// through outboxhook.AddMessages in transactions of 1000.
func loadOutbox(db *gorm.DB, n int, topic string) error {
	if err := usePlugin(db, outboxhook.Config{}); err != nil {
		return err
	}
	if db.Dialector.Name() == "postgres" {
		q := `INSERT INTO outbox_messages (id, type, aggregate_type, aggregate_id, topic, payload, occurred_at)
SELECT gen_random_uuid(), 'bench.event', 'Bench', 'agg-' || (i % 1000), ?, jsonb_build_object('i', i, 'pad', repeat('x', 100)), now()
FROM generate_series(1, ?) AS i`
		if err := db.Exec(q, topic, n).Error; err != nil {
			return err
		}
		return db.Exec(`ANALYZE outbox_messages`).Error
	}
	if err := addBacklog(db, n, topic); err != nil {
		return err
	}
	if db.Dialector.Name() == "sqlite" {
		return db.Exec(`ANALYZE`).Error
	}
	return db.Exec(`ANALYZE TABLE outbox_messages`).Error
}
