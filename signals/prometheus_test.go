package signals

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
)

// app is an application's exporter the tests control.
type app struct {
	reg     *prometheus.Registry
	exp     *promtest.Exporter
	single  prometheus.Gauge
	pair    *prometheus.GaugeVec
	vanish  *prometheus.GaugeVec
	latency prometheus.Histogram
	frozen  time.Time
}

func newApp(t *testing.T) *app {
	a := &app{reg: prometheus.NewRegistry(), frozen: time.Now().Add(-40 * time.Second).Truncate(time.Millisecond)}
	a.single = prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_single"})
	a.pair = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_pair"}, []string{"x"})
	a.vanish = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_vanish"}, []string{"x"})
	a.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "app_latency_seconds", Buckets: []float64{0.01, 0.1, 1}})
	inf := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_inf"})
	inf.Set(math.Inf(1))
	a.pair.WithLabelValues("a").Set(1)
	a.pair.WithLabelValues("b").Set(2)
	a.vanish.WithLabelValues("1").Set(3)
	a.single.Set(0.25)
	a.reg.MustRegister(a.single, a.pair, a.vanish, a.latency, inf, frozenCollector{at: a.frozen})
	a.exp = promtest.Export(t, a.reg)
	return a
}

// frozenCollector exports app_frozen with an explicit timestamp 40 s
// old: Prometheus keeps answering with it (no stale marker is written
// for a sample that carries its own time) while its data age.
type frozenCollector struct{ at time.Time }

var frozenDesc = prometheus.NewDesc("app_frozen", "a reading whose data stopped", nil, nil)

func (f frozenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- frozenDesc }
func (f frozenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewMetricWithTimestamp(f.at, prometheus.MustNewConstMetric(frozenDesc, prometheus.GaugeValue, 0.5))
}

// reader reads signals on one Prometheus, with the jobs' work as a test
// sets it.
type reader struct {
	cfg  PrometheusConfig
	mu   sync.Mutex
	jobs jobWatch
}

func (r *reader) watch() jobWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.jobs
}

func (r *reader) sampler(t *testing.T, sigs ...PrometheusSignal) *promSampler {
	t.Helper()
	cfg := r.cfg
	cfg.Signals = sigs
	s, err := newPromSampler(cfg, r.watch)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// read takes one reading of the first signal of s.
func read(s *promSampler) Sample {
	return s.read(context.Background(), s.signals[0], time.Now)
}

func absolute(name, query string) PrometheusSignal {
	return PrometheusSignal{Name: Name(name), Query: query, Baseline: BaselineNone, Unit: UnitSeconds, Source: "throttled.hcl:7"}
}

// mustFail checks that x failed and that its error names the signal, its
// file:line and each of want.
func mustFail(t *testing.T, x Sample, want ...string) {
	t.Helper()
	if x.Err == nil {
		t.Fatalf("%s: no error, value %v: want a failed sample", x.Name, x.Value)
	}
	if errors.Is(x.Err, ErrWarmingUp) {
		t.Fatalf("%s: warming up (%v), want a failure", x.Name, x.Err)
	}
	for _, w := range append([]string{`prometheus signal "` + string(x.Name) + `"`, "throttled.hcl:7"}, want...) {
		if !strings.Contains(x.Err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", x.Name, x.Err, w)
		}
	}
}

// Every rule of a Prometheus signal, read on a real Prometheus scraping
// an exporter the test controls.
func TestPrometheusSignalRules(t *testing.T) {
	a := newApp(t)
	prom := promtest.Start(t, promtest.Options{Targets: []string{a.exp.Addr}})
	prom.WaitSeries(t, "app_pair", 2, 30*time.Second)
	prom.WaitSeries(t, "app_frozen", 1, 30*time.Second)
	// Two scrapes of the histogram, so rate() has its two samples.
	prom.WaitSeries(t, "rate(app_latency_seconds_count[5s])", 1, 30*time.Second)
	r := &reader{cfg: PrometheusConfig{Address: prom.URL}}

	t.Run("one series is its value, dated by its data", func(t *testing.T) {
		x := read(r.sampler(t, absolute("app_value", "app_single")))
		if x.Err != nil || x.Value != 0.25 || x.Unit != UnitSeconds {
			t.Fatalf("got %+v, want 0.25 seconds", x)
		}
		if age := time.Since(x.At); age < 0 || age > 5*time.Second {
			t.Errorf("dated %s ago, want the last scrape's time (scraped every second)", age)
		}
	})
	t.Run("more than one series fails, with the count", func(t *testing.T) {
		mustFail(t, read(r.sampler(t, absolute("app_pair_p", "app_pair"))), "2 series, want one")
	})
	t.Run("a range vector fails", func(t *testing.T) {
		mustFail(t, read(r.sampler(t, absolute("app_matrix", "app_single[1m]"))), "a matrix result, want one number")
	})
	t.Run("a scalar is one number", func(t *testing.T) {
		x := read(r.sampler(t, absolute("app_scalar", "scalar(app_single) * 2")))
		if x.Err != nil || x.Value != 0.5 {
			t.Fatalf("got %+v, want 0.5", x)
		}
	})
	t.Run("a syntax error fails in Prometheus's words", func(t *testing.T) {
		mustFail(t, read(r.sampler(t, absolute("app_syntax", "sum(app_single"))), "Prometheus refused it", "parse error")
	})
	t.Run("NaN without traffic is a failure", func(t *testing.T) {
		q := "histogram_quantile(0.99, sum(rate(app_latency_seconds_bucket[5s])) by (le))"
		mustFail(t, read(r.sampler(t, absolute("app_p99", q))), "read NaN", "set traffic and min_traffic")
	})
	t.Run("NaN under min_traffic is no foreground", func(t *testing.T) {
		sig := absolute("app_p99", "histogram_quantile(0.99, sum(rate(app_latency_seconds_bucket[5s])) by (le))")
		sig.Traffic, sig.MinTraffic = "sum(rate(app_latency_seconds_count[5s]))", 1
		x := read(r.sampler(t, sig))
		if x.Err != nil || !x.NoForeground {
			t.Fatalf("got %+v (error %v), want no foreground", x, x.Err)
		}
	})
	t.Run("Inf is a failure", func(t *testing.T) {
		mustFail(t, read(r.sampler(t, absolute("app_infinite", "app_inf"))), "read +Inf")
	})
	t.Run("no series yet is warming up, no series later a failure", func(t *testing.T) {
		s := r.sampler(t, absolute("app_new", "app_not_exported_yet"))
		if x := read(s); !errors.Is(x.Err, ErrWarmingUp) {
			t.Fatalf("got %+v (error %v), want warming up", x, x.Err)
		}
		v := r.sampler(t, absolute("app_gone", `app_vanish{x="1"}`))
		if x := read(v); x.Err != nil || x.Value != 3 {
			t.Fatalf("got %+v, want 3", x)
		}
		a.vanish.DeleteLabelValues("1")
		prom.WaitSeries(t, `app_vanish{x="1"}`, 0, 30*time.Second)
		mustFail(t, read(v), "no series")
	})
	t.Run("dated by the data, not by the answer", func(t *testing.T) {
		x := read(r.sampler(t, absolute("app_stale", "avg_over_time(app_frozen[5m])")))
		if x.Err != nil || x.Value != 0.5 {
			t.Fatalf("got %+v, want 0.5", x)
		}
		if !x.At.Equal(a.frozen) {
			t.Errorf("dated %s, want the data's own %s (%s old), not the answer's", x.At, a.frozen, time.Since(a.frozen).Round(time.Second))
		}
	})
	t.Run("a hung Prometheus times out", func(t *testing.T) {
		s := r.sampler(t, absolute("app_value", "app_single"))
		s.cfg.Timeout = 300 * time.Millisecond
		prom.Hang(t)
		x := read(s)
		prom.Resume(t)
		mustFail(t, x, "timed out after 300ms")
		if !errors.Is(x.Err, ErrTimeout) {
			t.Errorf("error %v is not ErrTimeout", x.Err)
		}
	})
	t.Run("Prometheus down is unreachable", func(t *testing.T) {
		s := r.sampler(t, absolute("app_value", "app_single"))
		prom.Stop()
		x := read(s)
		mustFail(t, x, prom.URL)
		if !errors.Is(x.Err, ErrUnreachable) {
			t.Errorf("error %v is not ErrUnreachable", x.Err)
		}
	})
}

// Credentials Prometheus refuses fail the sample without showing them;
// the right ones read.
func TestPrometheusSignalCredentials(t *testing.T) {
	a := newApp(t)
	prom := promtest.Start(t, promtest.Options{Targets: []string{a.exp.Addr}, BasicAuth: true})
	const token = "tok-3f9a7c1e5b2d4f60"
	for _, tc := range []struct {
		name   string
		cfg    PrometheusConfig
		secret string
	}{
		{"bearer token", PrometheusConfig{BearerToken: token}, token},
		{"wrong password", PrometheusConfig{BasicUser: promtest.BasicUser, BasicPassword: "not-the-" + promtest.BasicPassword}, "not-the-" + promtest.BasicPassword},
		{"none", PrometheusConfig{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Address = prom.URL
			x := read((&reader{cfg: tc.cfg}).sampler(t, absolute("app_value", "app_single")))
			mustFail(t, x, "401 Unauthorized")
			if !errors.Is(x.Err, ErrCredentialsRefused) {
				t.Errorf("error %v is not ErrCredentialsRefused", x.Err)
			}
			if tc.secret != "" && strings.Contains(x.Err.Error(), tc.secret) {
				t.Errorf("error %q shows the secret", x.Err)
			}
		})
	}
	t.Run("right password", func(t *testing.T) {
		cfg := PrometheusConfig{Address: prom.URL, BasicUser: promtest.BasicUser, BasicPassword: promtest.BasicPassword}
		pgtest.Eventually(t, 30*time.Second, func() error {
			return read((&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_single"))).Err
		})
	})
}

// A certificate the client does not trust fails the sample as a TLS
// failure; with the CA file it reads.
func TestPrometheusSignalTLS(t *testing.T) {
	a := newApp(t)
	prom := promtest.Start(t, promtest.Options{Targets: []string{a.exp.Addr}, TLS: true})
	x := read((&reader{cfg: PrometheusConfig{Address: prom.URL}}).sampler(t, absolute("app_value", "app_single")))
	mustFail(t, x, "TLS failure", "certificate")
	cfg := PrometheusConfig{Address: prom.URL, CAFile: prom.CAFile}
	pgtest.Eventually(t, 30*time.Second, func() error {
		return read((&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_single"))).Err
	})
}

// With baseline job-free the value is the reading over its level while no
// job was at work; a reading taken with a job at work is judged against
// that level and teaches it nothing.
func TestPrometheusSignalJobFreeBaseline(t *testing.T) {
	a := newApp(t)
	prom := promtest.Start(t, promtest.Options{Targets: []string{a.exp.Addr}})
	prom.WaitSeries(t, "app_single", 1, 30*time.Second)
	r := &reader{cfg: PrometheusConfig{Address: prom.URL}, jobs: jobWatch{from: time.Now().Add(-time.Hour)}}
	sig := PrometheusSignal{Name: "app_ratio", Query: "app_single", Delay: 5 * time.Second, Source: "throttled.hcl:7"}
	s := r.sampler(t, sig)
	x := read(s)
	if x.Err != nil || x.Value != 1 || x.Baseline != 0.25 || x.Unit != UnitRatio {
		t.Fatalf("job-free: got %+v (error %v), want ratio 1 over a baseline of 0.25", x, x.Err)
	}
	r.mu.Lock()
	r.jobs.seen = time.Now() // a job at work from now on
	r.mu.Unlock()
	a.single.Set(0.5)
	pgtest.Eventually(t, 30*time.Second, func() error {
		x = read(s)
		if x.Err != nil || x.Value != 2 || x.Baseline != 0.25 {
			return errors.New("want ratio 2 over the job-free 0.25")
		}
		return nil
	})
	// Without a job-free reading yet, the ratio is unknown: warming up.
	r.mu.Lock()
	r.jobs = jobWatch{from: time.Now()}
	r.mu.Unlock()
	if x := read(r.sampler(t, sig)); !errors.Is(x.Err, ErrWarmingUp) {
		t.Fatalf("no job-free reading yet: got %+v (error %v), want warming up", x, x.Err)
	}
}

// The baseline's rules at fixed instants: learnt from job-free readings
// over 0, standing in for the window, then unknown.
func TestAppBaseline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b appBaseline
	if _, err := b.ratio(1, t0, time.Minute, time.Second); !errors.Is(err, ErrWarmingUp) {
		t.Fatalf("before any reading: %v, want warming up", err)
	}
	b.observe(2, t0, false) // a job at work: no baseline
	b.observe(0, t0, true)  // 0: no baseline
	if _, err := b.ratio(1, t0, time.Minute, time.Second); !errors.Is(err, ErrWarmingUp) {
		t.Fatalf("after no usable reading: %v, want warming up", err)
	}
	b.observe(2, t0, true)
	b.observe(4, t0.Add(time.Second), true)
	if r, err := b.ratio(6, t0.Add(time.Second), time.Minute, time.Second); err != nil || r != 2 {
		t.Fatalf("ratio %v, %v; want 6 over the mean 3 = 2", r, err)
	}
	b.observe(10, t0.Add(2*time.Minute), true) // the old ones leave the span
	if r, _ := b.ratio(10, t0.Add(2*time.Minute), time.Minute, time.Second); r != 1 {
		t.Fatalf("ratio %v, want 1 over the last minute's readings only", r)
	}
	if _, err := b.ratio(10, t0.Add(4*time.Minute), time.Minute, time.Second); !errors.Is(err, ErrWarmingUp) {
		t.Fatalf("a baseline two minutes old, window one: %v, want warming up", err)
	}
}

// The selectors a query reads, to date its data by.
func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{job="api"}[15s])) by (le))`,
			[]string{`http_request_duration_seconds_bucket{job="api"}`}},
		{`sum by (le) (rate(x[1m] offset 5m)) / on(job) group_left sum(y{a="b}"})`, []string{"x", `y{a="b}"}`}},
		{`avg_over_time(gitlab_service_apdex:ratio_5m{type='patroni'}[5m])`, []string{`gitlab_service_apdex:ratio_5m{type='patroni'}`}},
		{`vector(1) + scalar(up) # comment x`, []string{"up"}},
		{`{__name__="a"} and b @ end() unless c`, []string{`{__name__="a"}`, "b", "c"}},
		{`rate(x[5m:1m]) > bool 0 or x`, []string{"x"}},
	} {
		got := selectors(tc.expr)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("selectors(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// FuzzSelectors: any text, however broken, gives selectors without
// panicking, each one non-empty.
func FuzzSelectors(f *testing.F) {
	for _, s := range []string{`sum(rate(x{a="b"}[1m])) by (le)`, `{`, `"`, "a{b=\"\\", "x offset", "@", "by (", "#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, s := range selectors(expr) {
			if s == "" {
				t.Fatalf("selectors(%q) has an empty one", expr)
			}
		}
	})
}
