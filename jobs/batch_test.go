package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// A batch that fails while the primary hangs still ends within the batch
// deadline (4 x StatementTimeout + 5s): its rollback is bounded too.
func TestRollbackAfterFailedBatchIsBounded(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	t.Cleanup(c.ResumePrimary)
	j, err := jobs.New(jobs.Config{Name: "rollback-bound", StatementTimeout: 500 * time.Millisecond, MaxAttempts: 1},
		db, newFixedPacer(10, 1),
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
				return jobs.Result{}, err
			}
			if err := c.HangPrimary(); err != nil {
				return jobs.Result{}, err
			}
			return jobs.Result{}, errors.New("application error: not retryable")
		})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	// batch deadline is 4*0.5s+5s = 7s; allow plenty more.
	pgtest.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-done:
			t.Logf("Run returned: %v", err)
			return nil
		default:
			return &stillWaiting{string(j.Status().State) + " (" + j.Status().LastError + ")"}
		}
	})
}
