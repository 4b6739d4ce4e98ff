package signals

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const ms = 1e-3

// feed adds one latency (in milliseconds) every 250 ms from at, all idle
// or all not, and returns the last samples and the next instant.
func feed(f *foreground, at time.Time, idle bool, lats ...float64) ([]Sample, time.Time) {
	var out []Sample
	for _, l := range lats {
		out = f.add(l*ms, idle, at)
		at = at.Add(250 * time.Millisecond)
	}
	return out, at
}

// repeat returns n copies of v.
func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func sampleOf(t *testing.T, out []Sample, name Name) Sample {
	t.Helper()
	for _, s := range out {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s in %v", name, out)
	return Sample{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func newForeground() *foreground {
	return &foreground{window: 2 * time.Second, smooth: ewma{tau: time.Second}}
}

func TestForegroundWarmUpIsUnknownUntilAnIdleWindow(t *testing.T) {
	f := newForeground()
	// 2 s of readings at 250 ms: the window is complete at the 9th.
	out, at := feed(f, t0, true, repeat(1, 8)...)
	r := sampleOf(t, out, ForegroundLatency)
	if !errors.Is(r.Err, ErrBaselineWarmup) || r.Value != 0 || r.Raw != 0 || r.Unit != UnitRatio {
		t.Fatalf("ratio during warm-up: %+v; want ErrBaselineWarmup, no value", r)
	}
	if s := sampleOf(t, out, ForegroundLatencySeconds); s.Err != nil || !near(s.Raw, 1*ms) || s.Unit != UnitSeconds {
		t.Fatalf("latency during warm-up: %+v; want 1 ms, known", s)
	}
	out, _ = feed(f, at, true, 1)
	r = sampleOf(t, out, ForegroundLatency)
	if r.Err != nil || !near(r.Value, 1) || !near(r.Raw, 1) {
		t.Fatalf("ratio after an idle window: %+v; want 1.0", r)
	}
}

func TestForegroundLearnsOnlyFromJobFreeWindows(t *testing.T) {
	f := newForeground()
	// Minutes of readings while a job works teach nothing.
	out, at := feed(f, t0, false, repeat(5, 400)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) ||
		!strings.Contains(r.Err.Error(), "1m40s so far") {
		t.Fatalf("ratio after 100 s of job work: %v; want still warming up, saying for how long", r.Err)
	}
	// An idle stretch broken by one busy reading restarts the window.
	_, at = feed(f, at, true, repeat(1, 6)...)
	_, at = feed(f, at, false, 5)
	out, at = feed(f, at, true, repeat(1, 6)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("ratio after a broken window: %+v; want still warming up", r)
	}
	// A failed probe restarts it too.
	f.failed(at, errors.New("boom"))
	out, at = feed(f, at.Add(250*time.Millisecond), true, repeat(1, 8)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("ratio 2 s after a failure, window not complete: %+v; want still warming up", r)
	}
	out, _ = feed(f, at, true, 1)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || f.baseline != 1*ms {
		t.Fatalf("after a whole idle window: %v, baseline %v; want learnt at 1 ms", r.Err, f.baseline)
	}
}

func TestForegroundBaselineRisesSlowlyFallsFaster(t *testing.T) {
	tests := []struct {
		name   string
		window float64 // the window's latencies, ms
		want   float64 // the baseline after it, ms
	}{
		{"a slower window moves it 5 %", 3, 1 + 0.05*2},
		{"a faster window moves it 30 %", 0.5, 1 + 0.3*(0.5-1)},
		{"a window under the floor counts as the floor", 0.001, 1 + 0.3*(0.05-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newForeground()
			_, at := feed(f, t0, true, repeat(1, 9)...)
			if !near(f.baseline, 1*ms) {
				t.Fatalf("first baseline %v ms; want 1", f.baseline/ms)
			}
			feed(f, at, true, repeat(tt.window, 9)...)
			if !near(f.baseline, tt.want*ms) {
				t.Fatalf("baseline %v ms; want %v", f.baseline/ms, tt.want)
			}
		})
	}
}

func TestForegroundRawIsTheMedianOfRecentProbes(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, 9)...)
	// One slow commit among five is not a reading; three are.
	out, at := feed(f, at, false, 1, 1, 1, 1, 20)
	r := sampleOf(t, out, ForegroundLatency)
	if !near(r.Raw, 1) {
		t.Fatalf("raw ratio with one slow probe in five: %v; want 1", r.Raw)
	}
	if s := sampleOf(t, out, ForegroundLatencySeconds); !near(s.Raw, 20*ms) {
		t.Fatalf("foreground_latency_seconds raw %v; want the probe's own 20 ms", s.Raw)
	}
	out, at = feed(f, at, false, 20, 20)
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 20) || r.Value <= 1 || r.Value >= 20 {
		t.Fatalf("raw ratio with three slow probes in five: %v (smoothed %v); want 20, smoothed rising", r.Raw, r.Value)
	}
	// A failure fails both, with no value, and forgets the recent probes.
	out = f.failed(at, ErrCanary)
	for _, s := range out {
		if !errors.Is(s.Err, ErrCanary) || s.Value != 0 || s.Raw != 0 {
			t.Fatalf("failed probe: %+v; want the error and no value", s)
		}
	}
	out, _ = feed(f, at.Add(250*time.Millisecond), false, 2)
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 2) {
		t.Fatalf("raw ratio after a failure: %v; want the new probe's 2", r.Raw)
	}
	if f.baseline != 1*ms {
		t.Fatalf("baseline moved while jobs worked: %v ms", f.baseline/ms)
	}
}

func TestQuantile(t *testing.T) {
	tests := []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 0.5, 2},
		{[]float64{5}, 0.25, 5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8}, 0.25, 2},
		{[]float64{1, 2}, 0, 1},
		{[]float64{1, 2}, 1, 2},
	}
	for _, tt := range tests {
		if got := quantile(tt.xs, tt.q); got != tt.want {
			t.Errorf("quantile(%v, %v) = %v; want %v", tt.xs, tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("quantile of nothing is not NaN")
	}
}

func TestForegroundLatencyConfig(t *testing.T) {
	base := Config{PrimaryDSN: "postgres://u@h/db", Cores: 2}
	on := base
	on.ForegroundLatency, on.ForegroundLatencyWindow = true, 500*time.Millisecond
	if _, err := New(on); err == nil || !strings.Contains(err.Error(), "ForegroundLatencyWindow 500ms") {
		t.Fatalf("New with a 2-probe window: %v; want an error naming ForegroundLatencyWindow", err)
	}
	off := base
	off.ForegroundLatencyWindow = 500 * time.Millisecond
	p, err := New(off)
	if err != nil {
		t.Fatalf("New with the canary off: %v", err)
	}
	if p.canary != nil || len(p.samplers()) != 1 {
		t.Fatalf("canary off, samplers %d", len(p.samplers()))
	}
	on.ForegroundLatencyWindow = 0
	if p, err = New(on); err != nil || p.canary == nil || p.cfg.ForegroundLatencyWindow != DefaultForegroundLatencyWindow {
		t.Fatalf("New with the canary on: %v; want a canary with the default window", err)
	}
	neg := on
	neg.ForegroundLatencyWindow = -time.Second
	if _, err := New(neg); err == nil || !strings.Contains(err.Error(), "ForegroundLatencyWindow must not be negative") {
		t.Fatalf("negative window: %v", err)
	}
}
