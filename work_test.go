package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// A Prometheus reading is job-free only when no job was at work by any
// means the process knows. Here the work has no session the primary could
// name as a job's (a remote worker's own application_name, a batch that
// writes elsewhere): a batch in flight through the Client's own pacer, and
// then a token out that only Options.Work knows of. While either lasts the
// application's latency rises tenfold and the baseline must not learn it;
// once both end, it does.
func TestJobFreeBaselineCountsWorkNoSessionShows(t *testing.T) {
	c := pgtest.Cluster(t)
	reg := prometheus.NewRegistry()
	latency := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_latency_seconds"})
	latency.Set(0.02)
	reg.MustRegister(latency)
	exp := promtest.Export(t, reg)
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	prom.WaitSeries(t, "app_latency_seconds", 1, 30*time.Second)

	var tokenOut atomic.Bool
	const delay = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, NoForegroundLatency: true,
		Signals: signals.Config{Prometheus: signals.PrometheusConfig{Address: prom.URL, Timeout: 500 * time.Millisecond,
			Signals: []signals.PrometheusSignal{{Name: "app_ratio", Query: "app_latency_seconds", Delay: delay, Unit: signals.UnitSeconds, Source: "lab"}}}},
		Controller: throttle.Config{Rules: map[signals.Name]throttle.Rule{"app_ratio": {Target: 50, MaxAge: 10 * time.Second}}},
		Work: func() time.Time {
			if tokenOut.Load() {
				return time.Now()
			}
			return time.Time{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	reading := func() signals.Sample {
		for _, x := range tc.Snapshot().Samples {
			if x.Name == "app_ratio" {
				return x
			}
		}
		return signals.Sample{Err: errors.New("no app_ratio sample yet")}
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		if x := reading(); x.Err != nil || x.Baseline < 0.019 || x.Baseline > 0.021 {
			return fmt.Errorf("baseline %v (error %v), want the job-free 0.02", x.Baseline, x.Err)
		}
		return nil
	})
	// holdsOut checks, for a reading whose data come 2*delay after the
	// latency rose, that the baseline stayed at the job-free level and
	// the ratio says what the work costs.
	holdsOut := func(what string) {
		t.Helper()
		rose := time.Now()
		latency.Set(0.2)
		var x signals.Sample
		pgtest.Eventually(t, 30*time.Second, func() error {
			if x = reading(); x.Err != nil || !x.At.After(rose.Add(2*delay)) {
				return fmt.Errorf("no reading of data 2×delay after the rise yet (error %v)", x.Err)
			}
			return nil
		})
		if x.Baseline > 0.021 || x.Value < 9 {
			t.Fatalf("%s: baseline %v, ratio %v; want the job-free 0.02 kept and a ratio near 10", what, x.Baseline, x.Value)
		}
		latency.Set(0.02)
	}

	jp, err := tc.Pacer(jobs.Config{Name: "remote_like", MaxRate: 10})
	if err != nil {
		t.Fatal(err)
	}
	done, err := jp.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holdsOut("a batch in flight")
	done(1, time.Second, nil)

	tokenOut.Store(true)
	holdsOut("a token out")
	tokenOut.Store(false)

	// With no work at all, the baseline learns the new level.
	latency.Set(0.2)
	pgtest.Eventually(t, 60*time.Second, func() error {
		if x := reading(); x.Err != nil || x.Baseline < 0.1 {
			return fmt.Errorf("baseline %v (error %v), want it learning 0.2 with no job at work", x.Baseline, x.Err)
		}
		return nil
	})
}
