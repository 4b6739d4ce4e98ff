package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrCannotWrite marks a role that may not create or change schema
// throttled: coordination (every sidecar, and exec unless --solo) needs
// one that may.
var ErrCannotWrite = errors.New("schema: the role may not write schema throttled")

// cannotWriteError is ErrCannotWrite in words of its own: the role and
// what it lacks.
type cannotWriteError string

func (e cannotWriteError) Error() string        { return string(e) }
func (e cannotWriteError) Is(target error) bool { return target == ErrCannotWrite }

// CheckWrite reports whether the session's role may write schema
// throttled as coordination does, changing nothing: it creates the schema
// (if missing) in a transaction it rolls back, and, where the schema's
// tables exist, asks for the privileges coordination uses. A refusal is
// an error wrapping ErrCannotWrite that names the role and what it lacks.
func CheckWrite(ctx context.Context, db Beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var role string
	if err := tx.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	for _, q := range []string{"SET LOCAL lock_timeout = '5s'", "CREATE SCHEMA IF NOT EXISTS " + Name} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return cannotWrite(role, err)
		}
	}
	var missing []string
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')
		ORDER BY 1`, Name)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
		missing = append(missing, Name+"."+t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if len(missing) > 0 {
		return cannotWriteError(fmt.Sprintf("schema: role %q may not write %s; give coordination a role that owns schema %s (the one that ran throttled migrate)",
			role, missing[0], Name))
	}
	return nil
}

// currentRole is the session's role, for a refusal's words; "" when it
// cannot be read.
func currentRole(ctx context.Context, db Beginner) string {
	tx, err := db.Begin(ctx)
	if err != nil {
		return ""
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var role string
	_ = tx.QueryRow(ctx, "SELECT current_user").Scan(&role)
	return role
}

// cannotWrite turns a refusal of the schema's statements into an error
// wrapping ErrCannotWrite that names the role; other errors pass as they
// are.
func cannotWrite(role string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return cannotWriteError(fmt.Sprintf("schema: role %q may not create or change schema %s (%s); give coordination a role that may: one that owns the schema, or with CREATE on the database",
			role, Name, pgErr.Message))
	}
	return fmt.Errorf("schema: %w", err)
}
