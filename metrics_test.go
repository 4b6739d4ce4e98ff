package throttled_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
)

// A job's why label comes from the status's code, never from its text:
// the hold's id and nothing after it, the binding signal, the want of a
// valid allocation, or the code; no numbers, no free text.
func TestWhyIsBounded(t *testing.T) {
	h12 := throttle.Hold{ID: "h12", Reason: "vacuum first: 42 rows"}
	for _, tc := range []struct {
		st   throttle.JobStatus
		want string
	}{
		{throttle.JobStatus{State: throttle.JobPaused, Code: throttle.CodeHeld, Reason: "paused: hold h12 on job:purge by alice (manual): vacuum first, until 2026-11-30T16:00:00Z", Holds: []throttle.Hold{h12}}, "hold h12"},
		// A reason that reads like a hold is not one: the code decides.
		{throttle.JobStatus{State: throttle.JobPaused, Code: throttle.CodeUnavailable, Reason: "paused: hold h9 on all"}, "no valid allocation"},
		{throttle.JobStatus{State: throttle.JobThrottled, Code: throttle.CodeCut, Reason: "throttled: cut by 30%: primary_load at 1.3 of target", Binding: "primary_load"}, "binding primary_load"},
		{throttle.JobStatus{State: throttle.JobPaused, Code: throttle.CodeCritical, Reason: "critical: primary_load reached 1.9 (critical 1)", Binding: "primary_load"}, "critical"},
		{throttle.JobStatus{State: throttle.JobPaused, Code: throttle.CodeStale, Reason: "stale: replica_lag_seconds (too old)", Binding: "replica_lag_seconds"}, "stale"},
		{throttle.JobStatus{State: throttle.JobRunning, Code: throttle.CodeSlowStart, Reason: "running: slow start: budget 2/s, doubling back toward 8/s"}, "slow_start"},
		{throttle.JobStatus{State: throttle.JobThrottled, Code: throttle.CodeTooSlow, Reason: "throttled: 0.05 batches/s, one batch every 20s"}, "too_slow"},
		{throttle.JobStatus{State: throttle.JobPaused, Code: throttle.CodeGated, Reason: `gated: vacuum_running{table="public.events"} at 1, over 0`}, "gated"},
		{throttle.JobStatus{State: throttle.JobRunning}, "running"},
	} {
		if got := throttled.Why(tc.st); got != tc.want {
			t.Errorf("Why(%s, %q) = %q; want %q", tc.st.Code, tc.st.Reason, got, tc.want)
		}
	}
}

// A process that embeds the library exports its jobs under the sidecar's
// names through Client.Collector: rows, batches, batch size and rows left
// from the job itself, state and why from the controller, the build info
// the dashboards' cluster variable reads; a second job of the same name
// replaces the first rather than colliding with it.
func TestCollectorExportsLibraryJobs(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Controller: throttle.Config{MaxBudget: 50, InitialBudget: 50}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	db, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batches := 0
	fn := func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		batches++
		_, err := tx.Exec(ctx, "SELECT 1")
		return jobs.Result{Rows: 7, Done: batches == 3}, err
	}
	job, err := tc.Job(jobs.Config{Name: "metrics-job", Total: 100, InitialBatchSize: 7, MinBatchSize: 7, MaxBatchSize: 7}, db, fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tc.Collector())
	pgtest.Eventually(t, 10*time.Second, func() error {
		return testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP throttled_jobs_rows_total Rows processed, by job.
# TYPE throttled_jobs_rows_total counter
throttled_jobs_rows_total{throttled_job="metrics-job"} 21
# HELP throttled_jobs_batches_total Batches run, by job.
# TYPE throttled_jobs_batches_total counter
throttled_jobs_batches_total{throttled_job="metrics-job"} 3
# HELP throttled_jobs_batch_size Last batch size, by job.
# TYPE throttled_jobs_batch_size gauge
throttled_jobs_batch_size{throttled_job="metrics-job"} 7
# HELP throttled_jobs_remaining_rows Rows a job still has to do (absent while unknown).
# TYPE throttled_jobs_remaining_rows gauge
throttled_jobs_remaining_rows{throttled_job="metrics-job"} 79
`), "throttled_jobs_rows_total", "throttled_jobs_batches_total", "throttled_jobs_batch_size", "throttled_jobs_remaining_rows")
	})
	if n, err := testutil.GatherAndCount(reg, "throttled_build_info", "throttled_controller_mode", "throttled_jobs_state", "throttled_signals_value"); err != nil || n < 1+5+1+1 {
		t.Fatalf("build info, modes, job state and signals: %d series, %v", n, err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// The same name again: the newer job replaces the older one.
	if _, err := tc.Job(jobs.Config{Name: "metrics-job"}, db, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather after a second job of the same name: %v", err)
	}
	if n, _ := testutil.GatherAndCount(reg, "throttled_jobs_rows_total"); n != 1 {
		t.Fatalf("%d rows series for one job name", n)
	}
}
