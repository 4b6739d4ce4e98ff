package throttled_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// Open takes a Prometheus signal as an option: a query it cannot read as
// one number fails Open naming the signal (as `run` refuses the file); a
// readable one paces, and once Prometheus is down the work stops and the
// decision says which signal is blind and why.
func TestOpenWithAPrometheusSignal(t *testing.T) {
	c := pgtest.Cluster(t)
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_p99_seconds"}, []string{"x"})
	g.WithLabelValues("a").Set(0.02)
	g.WithLabelValues("b").Set(0.03)
	reg.MustRegister(g)
	exp := promtest.Export(t, reg)
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	prom.WaitSeries(t, "app_p99_seconds", 2, 30*time.Second)
	open := func(query string) (*throttled.Client, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, NoForegroundLatency: true,
			Signals: signals.Config{Prometheus: signals.PrometheusConfig{Address: prom.URL, Timeout: 500 * time.Millisecond,
				Signals: []signals.PrometheusSignal{{Name: "app_p99", Query: query, Baseline: signals.BaselineNone, Unit: signals.UnitSeconds, Source: "lab"}}}},
			Controller: throttle.Config{Rules: map[signals.Name]throttle.Rule{"app_p99": {Target: 0.5, Required: true, MaxAge: 10 * time.Second}}}})
	}
	if tc, err := open("app_p99_seconds"); err == nil {
		tc.Close()
		t.Fatal("Open read two series as one signal")
	} else if !strings.Contains(err.Error(), `prometheus signal "app_p99" (lab)`) || !strings.Contains(err.Error(), "2 series") {
		t.Fatalf("Open: %v; want the signal and its series count", err)
	}
	tc, err := open("max(app_p99_seconds)")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	pgtest.Eventually(t, 30*time.Second, func() error {
		if d := tc.Decision(); d.Mode != status.ModeRunning {
			return fmt.Errorf("mode %s (%s), want running", d.Mode, d.Reason)
		}
		return nil
	})
	// The metrics name it as a Prometheus signal, with its baseline, for
	// the dashboards to select it by.
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(tc.Collector())
	n, err := testutil.GatherAndCount(reg2, "throttled_signals_prometheus_info")
	if err != nil || n != 1 {
		t.Fatalf("throttled_signals_prometheus_info: %d series (%v); want app_p99's", n, err)
	}
	if err := testutil.GatherAndCompare(reg2, strings.NewReader(`# HELP throttled_signals_prometheus_info 1 for each Prometheus signal the leader reads, with its baseline (job-free: its value is a ratio over the level while no job works; none: the reading itself).
# TYPE throttled_signals_prometheus_info gauge
throttled_signals_prometheus_info{baseline="none",signal="app_p99"} 1
`), "throttled_signals_prometheus_info"); err != nil {
		t.Fatal(err)
	}
	prom.Stop()
	pgtest.Eventually(t, 30*time.Second, func() error {
		d := tc.Decision()
		if d.Mode != status.ModeStale || d.Budget != 0 || !strings.Contains(d.Reason, "app_p99") || !strings.Contains(d.Reason, "unreachable") {
			return fmt.Errorf("mode %s, budget %v (%s): want stale on app_p99, unreachable", d.Mode, d.Budget, d.Reason)
		}
		return nil
	})
}
