package throttled_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/jobs"
)

// Wrap a batch function: the job waits for the controller before every
// batch, runs it in its own transaction under a statement timeout, sizes
// batches toward one second, retries what is worth retrying, and
// checkpoints its position so a restart resumes where it stopped.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db1/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	c, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: "postgres://monitor@db1/app", Cores: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	purge, err := jobs.DeleteOlderThan(ctx, pool, "sessions", "created_at", "id", 30*24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Job(jobs.Config{Name: "purge_sessions", Checkpoint: true}, pool, purge)
	if err != nil {
		log.Fatal(err)
	}
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Any batch function works: it gets the batch size and the last
// checkpoint, and returns what it did.
func Example_batchFunc() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@db1/app")
	c, _ := throttled.Open(ctx, throttled.Options{PrimaryDSN: "postgres://monitor@db1/app", Cores: 16})
	archive := func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		tag, err := tx.Exec(ctx, `WITH moved AS (
			DELETE FROM events WHERE id IN (SELECT id FROM events WHERE created_at < now() - interval '90 days' ORDER BY id LIMIT $1)
			RETURNING *) INSERT INTO events_archive SELECT * FROM moved`, b.Size)
		if err != nil {
			return jobs.Result{}, err
		}
		return jobs.Result{Rows: tag.RowsAffected(), Done: tag.RowsAffected() == 0}, nil
	}
	job, _ := c.Job(jobs.Config{Name: "archive_events", TargetBatchDuration: 500 * time.Millisecond}, pool, archive)
	_ = job.Run(ctx)
}

// Take tokens yourself, for a loop you drive (like rate.Limiter.Wait):
// every attempt, retries included, takes its own ticket.
func Example_acquire() {
	ctx := context.Background()
	c, _ := throttled.Open(ctx, throttled.Options{PrimaryDSN: "postgres://monitor@db1/app", Cores: 16})
	job, _ := c.Job(jobs.Config{Name: "reindex_docs"}, nil, nil)
	size := 100
	for {
		ticket, err := job.Acquire(ctx)
		if err != nil {
			return // ctx ended
		}
		rows, err := reindex(ctx, size)
		size = ticket.Done(rows, err) // the next batch size
		if err == nil && rows == 0 {
			return
		}
	}
}

func reindex(ctx context.Context, n int) (int64, error) { return 0, nil }
