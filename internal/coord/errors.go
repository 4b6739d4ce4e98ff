package coord

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/throttled/throttled/internal/coord/store"
)

// errors.go: a statement the coordination role may not run, said as the
// GRANT that would let it.

// tablePrivileges are what the coordination role needs on each of
// coordinated mode's tables.
var tablePrivileges = map[string]string{
	store.WorkersTable: "SELECT, INSERT, UPDATE, DELETE",
	store.LeaderTable:  "SELECT, INSERT, UPDATE",
}

// permissionError is a statement of coordinated mode that the coordination
// role may not run on one of throttled's tables (SQLSTATE 42501,
// insufficient_privilege, also raised when the role lacks USAGE on the
// schema). It is not an outage: it lasts until someone runs the GRANT it
// names, so it is said as such, never as "cannot reach".
type permissionError struct {
	role  string
	table string
	err   error
}

func (e *permissionError) Error() string {
	role := pgx.Identifier{e.role}.Sanitize()
	return fmt.Sprintf("throttled: permission denied: the coordination role %s lacks a privilege on %s (SQLSTATE 42501 insufficient_privilege); "+
		"run GRANT USAGE ON SCHEMA throttled TO %s; GRANT %s ON %s TO %s: %v",
		role, e.table, role, tablePrivileges[e.table], e.table, role, e.err)
}

func (e *permissionError) Unwrap() error { return e.err }

// denied turns err, a store.TableError, into a permissionError on its
// table when the server refused it for want of a privilege, and returns
// any other error as is.
func (e *Engine) denied(err error) error {
	var perm *permissionError
	var pgErr *pgconn.PgError
	var te *store.TableError
	if !errors.As(err, &perm) && errors.As(err, &pgErr) && pgErr.Code == "42501" && errors.As(err, &te) {
		return &permissionError{role: e.pool.Config().ConnConfig.User, table: te.Table, err: te.Err}
	}
	return err
}
