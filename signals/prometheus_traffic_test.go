package signals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
)

// A stalled application completes few requests, each slowly: its p99 is
// finite and high while its traffic is under min_traffic. That reading is
// the foreground's own and binds; only a reading with no observations
// (NaN) under min_traffic is "no foreground".
func TestPrometheusSlowReadingUnderMinTrafficBinds(t *testing.T) {
	reg := prometheus.NewRegistry()
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stall_latency_seconds", Buckets: []float64{0.05, 0.5, 5, 10}})
	reg.MustRegister(latency)
	exp := promtest.Export(t, reg)
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})

	// The application: one request every 2 s (0.5/s, under min_traffic 1),
	// each taking 4 s, 80 times a 50 ms target.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			latency.Observe(4)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	sig := absolute("stall_p99", "histogram_quantile(0.99, sum(rate(stall_latency_seconds_bucket[10s])) by (le))")
	sig.Traffic, sig.MinTraffic = "sum(rate(stall_latency_seconds_count[10s]))", 1
	s := (&reader{cfg: PrometheusConfig{Address: prom.URL}}).sampler(t, sig)
	pgtest.Eventually(t, 45*time.Second, func() error {
		x := read(s)
		switch {
		case x.Err != nil:
			return x.Err
		case x.NoForeground:
			return errors.New("read as no foreground: a slow reading at low traffic must bind")
		case !(x.Value > 1) || math.IsInf(x.Value, 0):
			return fmt.Errorf("read %v, want the stalled p99 (over 1 s)", x.Value)
		}
		return nil
	})

	// The application stops: no observations in the window, and the
	// traffic reads 0. That is no foreground.
	cancel()
	<-done
	pgtest.Eventually(t, 45*time.Second, func() error {
		if x := read(s); !x.NoForeground {
			return fmt.Errorf("read %+v (error %v), want no foreground once no request completes", x, x.Err)
		}
		return nil
	})
}
