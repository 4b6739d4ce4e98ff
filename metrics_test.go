package throttled_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

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
	// Every why label, of the job's state and of its time counted, is a
	// word of the one set.
	if whys := whyLabels(t, reg); len(whys) == 0 {
		t.Error("no why label exported")
	} else {
		for _, w := range whys {
			if !slices.Contains(status.Whys(), status.Why(w)) {
				t.Errorf("why=%q is not a word of status.Whys", w)
			}
		}
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

// Every job a process paces has its time counted at each why, from the
// decisions it applies, solo or as a coordinated worker, and exported as
// throttled_jobs_limited_seconds_total: the seconds add up to about the
// time the job was paced, and a hold counts under its source.
func TestLimitedSecondsMetrics(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	solo := throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, NoForegroundLatency: true,
		Controller: throttle.Config{MaxBudget: 50, InitialBudget: 50}}
	for _, tc := range []struct {
		name string
		opts throttled.Options
	}{{"solo", solo}, {"coordinated", clienttest.Coordinated(t, c, 50)}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NoForegroundLatency = true
			cl, err := throttled.Open(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			job := "limited-" + tc.name
			started := time.Now()
			p, err := cl.Pacer(jobs.Config{Name: job, MaxRate: 5})
			if err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, 20*time.Second, func() error {
				if clienttest.Running(p) != nil {
					return clienttest.Running(p)
				}
				if s := cl.LimitedSeconds(job)[status.WhyFullRate]; s < 2 {
					return fmt.Errorf("%.1f s at full rate: %s", s, cl.WhySlow(job))
				}
				return nil
			})
			if _, err := cl.LocalHolds().Add(hold.Request{Scope: hold.OneJob(job), Source: hold.SourceCLI, Reason: "look", TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, 10*time.Second, func() error {
				if s := cl.LimitedSeconds(job)["hold:cli"]; s < 1 {
					return fmt.Errorf("%.1f s held: %s", s, cl.WhySlow(job))
				}
				return nil
			})
			secs := cl.LimitedSeconds(job)
			total := 0.0
			for w, s := range secs {
				if !slices.Contains(status.Whys(), w) {
					t.Errorf("why %q is not in the bounded set", w)
				}
				total += s
			}
			if elapsed := time.Since(started).Seconds(); total > elapsed+0.5 || total < elapsed-3 {
				t.Errorf("%.1f s counted over %.1f s paced: %v", total, elapsed, secs)
			}
			if line := cl.WhySlow(job); !strings.Contains(line, "at full rate") || !strings.Contains(line, "held (cli)") {
				t.Errorf("summary %q names neither the full rate nor the hold", line)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(cl.Collector())
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				if mf.GetName() != "throttled_jobs_limited_seconds_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if labels["throttled_job"] == job {
						got[labels["why"]] = m.GetCounter().GetValue()
					}
				}
			}
			if got["full_rate"] < secs[status.WhyFullRate] || got["hold:cli"] < secs["hold:cli"] {
				t.Fatalf("exported %v; counted before the scrape %v (a counter only grows)", got, secs)
			}
			problems, err := testutil.GatherAndLint(reg, "throttled_jobs_limited_seconds_total")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

// whyLabels gathers reg and returns the value of every why label.
func whyLabels(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "why" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}
