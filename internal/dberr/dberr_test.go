package dberr

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRootCause(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "app"`}), `password authentication failed for user "app"`},
		{fmt.Errorf("dial: %w", refused), "connection refused"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}, "i/o timeout"},
		{errors.New("first line\n  second\tline"), "first line second line"},
	} {
		if got := RootCause(c.err); got != c.want {
			t.Errorf("RootCause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
