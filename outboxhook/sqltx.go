package outboxhook

import (
	"database/sql"

	"gorm.io/gorm"
)

// SQLTx returns the *sql.Tx of the transaction tx is in, and true; or nil and
// false when tx is not in a transaction (a *gorm.DB outside db.Transaction or
// db.Begin) or its transaction is not a database/sql one.
//
// It exists for libraries that share the GORM transaction by taking its
// *sql.Tx (River's riverdatabasesql driver, DTM's barriers, code of your own):
// they usually find it with tx.Statement.ConnPool.(*sql.Tx), which is false
// once the plugin is registered, because the plugin wraps every transaction
// to see its savepoints, its commit and its rollback (and false with
// PrepareStmt, plugin or not, where the transaction is a
// *gorm.PreparedStmtTX). SQLTx looks under those wrappers; without the plugin
// it returns the plain *sql.Tx GORM began.
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		if err := tx.Save(&order).Error; err != nil { // the order and its events
//			return err
//		}
//		sqlTx, _ := outboxhook.SQLTx(tx)
//		_, err := riverClient.InsertTx(ctx, sqlTx, ShipArgs{OrderID: order.ID}, nil)
//		return err // both commit, or neither does
//	})
//
// Statements run on the *sql.Tx are in the same transaction: they commit or
// roll back with it, and a nested db.Transaction's savepoint undoes them too.
// The plugin does not see them: a transaction whose *sql.Tx was handed out
// is in doubt, and its commit looks its outbox rows up in the transaction
// first (one query, when it wrote events), so that a ROLLBACK TO run on the
// *sql.Tx that undid outbox rows leaves those events pending on their
// aggregates, never lost. Still, leave the transaction's structure to GORM:
//
//   - Set savepoints with tx.SavePoint and tx.RollbackTo, or a nested
//     db.Transaction: a transaction in which an outbox write failed stays
//     unable to commit after a ROLLBACK TO run on the *sql.Tx (that is lifted
//     only by savepoints the plugin followed).
//   - With Config.Storage StorageWAL there are no rows to look up: a ROLLBACK
//     TO run on the *sql.Tx that undoes events emitted to the WAL is not seen,
//     and their aggregates forget them at commit.
//   - Do not Commit or Rollback the *sql.Tx: end the transaction through GORM
//     (db.Transaction returning, tx.Commit, tx.Rollback). The plugin does not
//     see a Commit run on the *sql.Tx; GORM's own commit then fails with
//     sql.ErrTxDone, and the aggregates keep as pending the events that did
//     commit.
func SQLTx(tx *gorm.DB) (*sql.Tx, bool) {
	if tx == nil || tx.Statement == nil {
		return nil, false
	}
	c := tx.Statement.ConnPool
	for {
		switch t := c.(type) {
		case *sql.Tx:
			return t, t != nil
		case *txn:
			if t == nil {
				return nil, false
			}
			if t.pool.p.cfg.Storage != StorageWAL {
				t.suspect() // with StorageWAL there is nothing to look up: see above
			}
			c = t.ConnPool
		case *gorm.PreparedStmtTX:
			if t == nil {
				return nil, false
			}
			c = t.Tx
		default:
			return nil, false
		}
	}
}
