package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// On the pair, with a real Prometheus: an application's p99 that nears
// its objective holds the budget (0.98 of the target: holding, no cut),
// and the job's batches, 400 ms while the p99 was far under it, fall to
// the floor (50 ms) within seconds, the rate as it was. Before, nothing
// tied the batch to a latency signal: they stayed at 400 ms.
func TestBatchesShrinkWhenAPrometheusSignalBinds(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	reg := prometheus.NewRegistry()
	p99 := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_p99_seconds"})
	p99.Set(0.1)
	reg.MustRegister(p99)
	exp := promtest.Export(t, reg)
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	prom.WaitSeries(t, "app_p99_seconds", 1, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, NoForegroundLatency: true,
		Signals: signals.Config{Prometheus: signals.PrometheusConfig{Address: prom.URL, Timeout: 500 * time.Millisecond,
			Signals: []signals.PrometheusSignal{{Name: "app_p99", Query: "max(app_p99_seconds)", Baseline: signals.BaselineNone, Unit: signals.UnitSeconds, Source: "test"}}}},
		Controller: throttle.Config{MaxBudget: 10, InitialBudget: 10, Rules: map[signals.Name]throttle.Rule{"app_p99": {Target: 0.5, Required: true, MaxAge: 10 * time.Second}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	// Each row costs 1 ms of the server's time; the target is 400 ms.
	var mu sync.Mutex
	var sizes []int
	j, err := tc.Job(jobs.Config{Name: "p99_shrink", TargetBatchDuration: 400 * time.Millisecond, InitialBatchSize: 100, MaxBatchSize: 5000}, db,
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			mu.Lock()
			sizes = append(sizes, b.Size)
			mu.Unlock()
			_, err := tx.Exec(ctx, "SELECT pg_sleep($1)", float64(b.Size)/1000)
			return jobs.Result{Rows: int64(b.Size)}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	last := func(n int) []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), sizes[max(0, len(sizes)-n):]...)
	}
	pgtest.Eventually(t, 60*time.Second, func() error {
		if s := last(3); len(s) < 3 || s[0] < 300 || s[2] < 300 {
			return fmt.Errorf("batch sizes %v; want about 400 (400 ms at 1 ms a row) while the p99 is far under its target", s)
		}
		return nil
	})
	p99.Set(0.49)
	pgtest.Eventually(t, 60*time.Second, func() error {
		d := tc.Decision()
		if d.Binding.Signal != "app_p99" || d.Code != status.CodeHolding {
			return fmt.Errorf("decision %s on %s: %s; want app_p99 holding the budget", d.Code, d.Binding, d.Reason)
		}
		if s := last(2); len(s) < 2 || s[0] > 60 || s[1] > 60 {
			return fmt.Errorf("batch sizes %v; want the floor, 50 ms (50 rows)", s)
		}
		if st := j.Status(); st.Rate < 1 {
			return errors.New("the rate fell under 1 batch/s: holding, the budget should not be cut")
		}
		return nil
	})
}
