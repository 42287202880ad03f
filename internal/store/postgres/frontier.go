package postgres

import (
	"fmt"

	"github.com/heraldgo/herald/internal/ident"
)

// tableOID is the table's oid (its identity, whatever schema it is in), as
// the relation t names in the session's search_path.
func tableOID(t ident.Table) string { return quoteLiteral(t.Quoted()) + `::regclass::oid` }

// epochNow is the current epoch (10 ms) by the database's clock.
const epochNow = `floor(extract(epoch FROM clock_timestamp()) * 100)::bigint`

// epochLockSQL takes, for the transaction, the shared lock of the current
// epoch keyed by the table's oid, unless the transaction (or the
// subtransaction it is in) took one on this table already: only its first
// epoch lock is needed (see Positions), and a transaction-local setting
// remembers it. A ROLLBACK TO SAVEPOINT releases a lock taken after the
// savepoint and reverts the setting with it. It yields one row.
func epochLockSQL(t ident.Table) string {
	return fmt.Sprintf(`CASE WHEN coalesce(current_setting(k.name, true), '') = ''
    THEN set_config(k.name, '1', true) || pg_advisory_xact_lock_shared(k.key, (%s %% 2147483648)::int)::text END
  FROM (SELECT 'herald.epoch_' || c.oid AS name, (c.oid::bigint - (c.oid::bigint >> 31 << 32))::int AS key
    FROM (SELECT %s AS oid) c) k`, epochNow, tableOID(t))
}

// frontierSQL is the frontier: the start of the oldest epoch whose lock a
// transaction holds on this table, or the time it looked when none does.
// Epochs are compared modulo 2^31 (248 days); one newer than the clock read
// counts as current.
func frontierSQL(t ident.Table) string {
	return fmt.Sprintf(`(SELECT CASE WHEN count(a.age) = 0 THEN c.t
    ELSE to_timestamp((c.e - max(CASE WHEN a.age > 1073741824 THEN 0 ELSE a.age END))::float8 / 100) END
  FROM (SELECT clock_timestamp() AS t, %s AS e) c
  LEFT JOIN LATERAL (SELECT ((c.e %% 2147483648) - l.objid::bigint + 2147483648) %% 2147483648 AS age
    FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())) a ON true
  GROUP BY c.t, c.e)`, epochNow, tableOID(t))
}
