package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeleteOlderThan returns a batch function that deletes the rows of table
// whose timeColumn is older than retention, walking the table in order of
// keyColumn (which must be unique and indexed, typically the primary key).
//
// Each batch takes the next Size keys after the checkpoint from the key
// index and deletes those of them that are old enough, so a batch never
// scans more than Size rows however sparse the old rows are, and the
// checkpoint (the last key looked at) makes a restart resume exactly there.
// The cutoff is fixed when the function is built (now minus retention), so
// rows that age during the run are left for the next run. Table and column
// names may be schema-qualified ("public.sessions") and are quoted safely.
func DeleteOlderThan(ctx context.Context, db DB, table, timeColumn, keyColumn string, retention time.Duration) (BatchFunc, error) {
	if retention <= 0 {
		return nil, fmt.Errorf("jobs: DeleteOlderThan: retention must be positive, got %s", retention)
	}
	tbl := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	tcol, kcol := pgx.Identifier{timeColumn}.Sanitize(), pgx.Identifier{keyColumn}.Sanitize()
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobs: DeleteOlderThan: %w", err)
	}
	defer rollback(ctx, tx)
	var keyType string
	var cutoff time.Time
	err = tx.QueryRow(ctx, `SELECT format_type(a.atttypid, a.atttypmod), now() - make_interval(secs => $3)
		FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped`,
		tbl, keyColumn, retention.Seconds()).Scan(&keyType, &cutoff)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("jobs: DeleteOlderThan: table %s has no column %q", table, keyColumn)
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: DeleteOlderThan: table %s: %w", table, err)
	}
	var hasTime bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped)`,
		tbl, timeColumn).Scan(&hasTime); err != nil || !hasTime {
		return nil, fmt.Errorf("jobs: DeleteOlderThan: table %s has no column %q", table, timeColumn)
	}
	// keyType comes from format_type, not from the caller.
	window := func(after string) string {
		return fmt.Sprintf(`WITH win AS (SELECT %[2]s AS k FROM %[1]s %[4]s ORDER BY %[2]s LIMIT $1),
del AS (DELETE FROM %[1]s WHERE %[2]s IN (SELECT k FROM win) AND %[3]s < $2 RETURNING 1)
SELECT (SELECT max(k)::text FROM win), (SELECT count(*) FROM win), (SELECT count(*) FROM del)`, tbl, kcol, tcol, after)
	}
	first := window("")
	next := window(fmt.Sprintf("WHERE %s > $3::%s", kcol, keyType))
	return func(ctx context.Context, tx pgx.Tx, b Batch) (Result, error) {
		var last *string
		var seen, deleted int64
		var err error
		if b.Position == "" {
			err = tx.QueryRow(ctx, first, b.Size, cutoff).Scan(&last, &seen, &deleted)
		} else {
			err = tx.QueryRow(ctx, next, b.Size, cutoff, b.Position).Scan(&last, &seen, &deleted)
		}
		if err != nil {
			return Result{}, err
		}
		res := Result{Rows: deleted, Done: seen == 0}
		if last != nil {
			res.Position = *last
		}
		return res, nil
	}, nil
}

// Statement returns a batch function that runs sql with $1 bound to the
// batch size, until it affects no row: the shape of an ad-hoc cleanup
// such as
//
//	DELETE FROM t WHERE id IN (SELECT id FROM t WHERE created_at < now() - interval '30 days' ORDER BY id LIMIT $1)
//
// The statement must make progress by itself (each run must see fewer
// matching rows), as a DELETE or an UPDATE that clears its own predicate
// does. Several processes running one statement on one table at once
// should lock what they take with FOR UPDATE SKIP LOCKED in the
// subquery: without it they queue behind each other's rows, find them
// deleted, affect no row, and stop early.
func Statement(sql string) BatchFunc {
	return func(ctx context.Context, tx pgx.Tx, b Batch) (Result, error) {
		tag, err := tx.Exec(ctx, sql, b.Size)
		if err != nil {
			return Result{}, err
		}
		return Result{Rows: tag.RowsAffected(), Done: tag.RowsAffected() == 0}, nil
	}
}
