package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A coordinated worker that cannot reach the database stops within its
// lease, and resumes after.
func TestCoordinatedWorkerStopsWhenTheDatabaseHangs(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := c.Primary.DSN(pgcluster.RoleAdmin)
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: admin, Coordinate: true,
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	db, err := pgxpool.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var batches atomic.Int64
	j, err := tc.Job(jobs.Config{Name: "hang-worker", StatementTimeout: time.Second}, db, func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		batches.Add(1)
		_, err := tx.Exec(ctx, "SELECT 1")
		return jobs.Result{Rows: 1}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go j.Run(runCtx)
	pgtest.Eventually(t, 20*time.Second, func() error {
		if !tc.Leader() || batches.Load() < 5 {
			return fmt.Errorf("leader %v, %d batches", tc.Leader(), batches.Load())
		}
		return nil
	})
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	hungAt := time.Now()
	pgtest.Eventually(t, 15*time.Second, func() error {
		if st := j.Status(); st.State != jobs.StatePaused {
			return errors.New("still " + string(st.State))
		}
		return nil
	})
	if d := time.Since(hungAt); d > throttled.DefaultLease+3*time.Second {
		t.Errorf("paused %s after the hang; want within the lease (%s) and a heartbeat", d, throttled.DefaultLease)
	}
	reason := j.Status().Reason
	if !strings.Contains(reason, "lease") && !strings.Contains(reason, "unconfirmed") && !strings.Contains(reason, "allocation") {
		t.Errorf("paused for %q", reason)
	}
	c.ResumePrimary()
	before := batches.Load()
	pgtest.Eventually(t, 30*time.Second, func() error {
		if batches.Load() <= before+2 {
			return errors.New("no work after the primary came back")
		}
		return nil
	})
}
