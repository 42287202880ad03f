// Package dberr says in one line why a database could not be reached, for the
// herald command and the examples' database helper.
package dberr

import (
	"errors"
	"net"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// RootCause returns the short reason behind a connection error, not a
// driver's chain, on one line.
func RootCause(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	var sysErr *os.SyscallError
	if errors.As(err, &sysErr) {
		return sysErr.Err.Error()
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return netErr.Err.Error()
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
