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

func coordinated(t *testing.T, c *pgcluster.Cluster, budget float64) throttled.Options {
	t.Helper()
	return throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Controller: throttle.Config{MaxBudget: budget, InitialBudget: budget}}
}

// leaderAndFollower opens two clients with opts (closed when the test
// ends), the first once it leads.
func leaderAndFollower(t *testing.T, opts throttled.Options) (leader, follower *throttled.Client) {
	t.Helper()
	ctx := context.Background()
	a, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	pgtest.Eventually(t, 10*time.Second, func() error {
		if !a.Leader() {
			return errors.New("first process does not lead yet")
		}
		return nil
	})
	b, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

// runningJob opens a client with opts (closed when the test ends) and
// returns it with job's pacer, once the job runs.
func runningJob(t *testing.T, opts throttled.Options, job string) (*throttled.Client, throttled.Pacer) {
	t.Helper()
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	p, err := tc.Pacer(jobs.Config{Name: job})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return running(p) })
	return tc, p
}

func running(p throttled.Pacer) error {
	js := p.Status()
	st, r := js.State, js.Reason
	if st == throttle.JobPaused {
		return fmt.Errorf("%s: %s", st, r)
	}
	return nil
}

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
