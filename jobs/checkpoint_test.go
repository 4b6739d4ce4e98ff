package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// Loading the checkpoint is bounded like a batch: against a primary that
// hangs, a job started with a long-lived ctx (the usual job.Run(ctx))
// fails with an error instead of waiting forever as "running".
func TestCheckpointLoadIsBounded(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	if _, err := db.Exec(ctx, "SELECT 1"); err != nil { // a pooled connection, as in a running process
		t.Fatal(err)
	}
	j, err := jobs.New(jobs.Config{Name: "ckpt-bound", Checkpoint: true, StatementTimeout: time.Second}, db, newFixedPacer(10, 1),
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			return jobs.Result{Done: true}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	// A batch against the hung primary would give up after its deadline
	// (4 x 1s + 5s); the checkpoint load should not wait longer than that.
	pgtest.Eventually(t, 20*time.Second, func() error {
		select {
		case <-done:
			return nil
		default:
			st := j.Status()
			return &stillWaiting{string(st.State)}
		}
	})
}

type stillWaiting struct{ state string }

func (s *stillWaiting) Error() string {
	return "Run still waiting on the hung primary; Status says " + s.state
}
