package holds

import (
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err, from a Store, says the cluster could
// not take the request for now rather than refused it: no host could be
// reached or none is the primary (each host's error is in err's text), a
// connection lost, a server shutting down or starting, or a primary
// demoted under the statement (read-only). In a failover's window every
// write fails so; nothing was written, and the same request succeeds
// once a primary answers: retry it.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "25006":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
