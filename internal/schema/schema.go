// Package schema holds throttled's own tables in the database it protects
// (schema "throttled") and applies their versioned migrations. Migrate is
// idempotent and safe to run from many processes at once: an advisory
// lock serialises them, and each run applies only what is missing, in
// order, in one transaction.
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var files embed.FS

// Name is the PostgreSQL schema throttled's tables live in.
const Name = "throttled"

// lockKey is the advisory lock migrations hold ("thrtld" in ASCII).
const lockKey = 0x746872746c64

// Migration is one versioned step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ErrTooNew reports a database migrated by a newer throttled than this
// one: running against it could misread tables it does not know.
var ErrTooNew = errors.New("schema: database is newer than this throttled")

// Migrations returns every migration, in version order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic(fmt.Sprintf("schema: migration file %q is not NNNN_name.sql", e.Name()))
		}
		sql, _ := files.ReadFile("migrations/" + e.Name())
		out = append(out, Migration{Version: v, Name: name, SQL: string(sql)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out
}

// Beginner starts a transaction: *pgx.Conn, *pgxpool.Pool and pgx.Tx all
// are one.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Querier runs a query: *pgx.Conn, *pgxpool.Pool and pgx.Tx all are one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Pending returns the migrations the database lacks, reading only: every
// one when schema throttled does not exist yet. A role that may only read
// (pg_monitor, through migration 0014) can ask.
func Pending(ctx context.Context, db Querier) ([]Migration, error) {
	rows, err := db.Query(ctx, "SELECT version FROM "+Name+".schema_migrations")
	var have []int
	if err == nil {
		have, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		return Migrations(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("schema: read versions: %w", err)
	}
	return missing(have)
}

// missing is what a database that has the migrations have lacks, in
// order; a database newer than this binary is ErrTooNew.
func missing(have []int) ([]Migration, error) {
	all := Migrations()
	if newest := slices.Max(append(have, 0)); newest > all[len(all)-1].Version {
		return nil, fmt.Errorf("%w: it has migration %d, this binary knows up to %d", ErrTooNew, newest, all[len(all)-1].Version)
	}
	var out []Migration
	for _, m := range all {
		if !slices.Contains(have, m.Version) {
			out = append(out, m)
		}
	}
	return out, nil
}

// Migrate applies the migrations the database lacks and returns them. It
// waits at most 10 s for another process's migration (lock_timeout) and
// bounds each statement by 60 s.
func Migrate(ctx context.Context, db Beginner) ([]Migration, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, q := range []string{
		"SET LOCAL lock_timeout = '10s'",
		"SET LOCAL statement_timeout = '60s'",
		fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", lockKey),
		"CREATE SCHEMA IF NOT EXISTS " + Name,
		`CREATE TABLE IF NOT EXISTS ` + Name + `.schema_migrations (
			version    int PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42501" {
				// Ended first: the refused transaction answers nothing.
				_ = tx.Rollback(ctx)
				return nil, cannotWrite(currentRole(ctx, db), err)
			}
			return nil, fmt.Errorf("schema: %s: %w", strings.Fields(q)[0], err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+Name+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("schema: read versions: %w", err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("schema: read versions: %w", err)
	}
	todo, err := missing(have)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, m := range todo {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("schema: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+Name+".schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("schema: record migration %d: %w", m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("schema: commit: %w", err)
	}
	return applied, nil
}
