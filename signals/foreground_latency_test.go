package signals

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = 1e-3

// feed adds one latency (in milliseconds) every 50 ms from at, each
// probe job-free or not, and returns the last samples and the next
// instant.
func feed(f *foreground, at time.Time, free bool, lats ...float64) ([]Sample, time.Time) {
	var out []Sample
	for _, l := range lats {
		out = f.add(l*ms, free, at)
		at = at.Add(50 * time.Millisecond)
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
	return &foreground{window: time.Minute, smooth: ewma{tau: time.Second}}
}

func TestForegroundWarmUpIsUnknownUntilEnoughJobFreeProbes(t *testing.T) {
	f := newForeground()
	out, at := feed(f, t0, true, repeat(1, minFree-1)...)
	r := sampleOf(t, out, ForegroundLatency)
	if !errors.Is(r.Err, ErrBaselineWarmup) || r.Value != 0 || r.Raw != 0 || r.Unit != UnitRatio ||
		!strings.Contains(r.Err.Error(), "waiting for 10 probes with no job session at work within 2s (9 now") {
		t.Fatalf("ratio during warm-up: %+v; want ErrBaselineWarmup saying how many of how many, no value", r)
	}
	if s := sampleOf(t, out, ForegroundLatencySeconds); s.Err != nil || !near(s.Raw, 1*ms) || s.Unit != UnitSeconds {
		t.Fatalf("latency during warm-up: %+v; want 1 ms, known", s)
	}
	out, _ = feed(f, at, true, 1)
	r = sampleOf(t, out, ForegroundLatency)
	if r.Err != nil || !near(r.Value, 1) || !near(r.Raw, 1) {
		t.Fatalf("ratio after 10 job-free probes: %+v; want 1.0", r)
	}
}

// The ratio is what the jobs add: the probes of the last two seconds
// over those of them that saw no job at work. A foreground that slows
// with no job at work reads 1 (it is not the jobs'); jobs at work at half
// the probes, slowing them threefold, read 1 + 0.5*(3-1) = 2.
func TestForegroundRatioIsWhatTheJobsAdd(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, 40)...)
	out, at := feed(f, at, true, repeat(3, 40)...)
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 1) {
		t.Fatalf("a foreground three times slower with no job at work: ratio %v; want 1", r.Raw)
	}
	for range 20 {
		_, at = feed(f, at, false, 3)
		out, at = feed(f, at, true, 1)
	}
	// The span's slowest probe is left out of the mean: 1 + 19/39*(3-1).
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 1+19.0/39*2) {
		t.Fatalf("jobs at work at half the probes, three times slower: ratio %v; want 1.97", r.Raw)
	}
	if !near(f.base, 1*ms) {
		t.Fatalf("baseline %v ms; want the job-free probes' 1 ms", f.base/ms)
	}
}

// A 0.5 s stall of every transaction with no job at work holds the
// canary's one probe in flight for 0.5 s (it commits one at a time): that
// probe is the span's slowest, which the baseline leaves out, so the
// baseline moves by at most a tenth.
func TestForegroundBaselineSurvivesAStall(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, 60)...)
	worst := f.base
	f.add(500*ms, true, at)
	at = at.Add(500 * time.Millisecond)
	worst = max(worst, f.base)
	for range 60 {
		_, at = feed(f, at, true, 1)
		worst = max(worst, f.base)
	}
	if worst > 1.1*ms {
		t.Fatalf("baseline rose to %.3f ms with a 0.5 s stall, want at most 1.1 ms (the true 1 ms)", worst/ms)
	}
}

// With jobs at work at nearly every probe, the last baseline measured
// stands in for the window; past it the ratio is unknown again.
func TestForegroundBaselineStandsInForAWindow(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, 40)...)
	out, at := feed(f, at, false, repeat(4, 40)...)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(r.Raw, 4) {
		t.Fatalf("jobs at work at every probe: %+v; want 4 against the last baseline", r)
	}
	out, _ = feed(f, at.Add(time.Minute), false, 4)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("a minute with no job-free probe: %+v; want the baseline unknown", r)
	}
	// Under the floor it is the floor.
	g := newForeground()
	out, _ = feed(g, t0, true, repeat(0.1, minFree)...)
	if r := sampleOf(t, out, ForegroundLatency); !near(g.base, baselineFloor) || !near(r.Raw, 0.2) {
		t.Fatalf("0.1 ms probes: baseline %v ms, ratio %v; want the %v ms floor, 0.2", g.base/ms, r.Raw, baselineFloor/ms)
	}
}

func TestForegroundFailureForgetsTheProbes(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, minFree)...)
	out, at := feed(f, at, false, repeat(20, 40)...)
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 20) || r.Value <= 1 || r.Value >= 20 {
		t.Fatalf("after two seconds of slow probes with jobs at work: raw %v, smoothed %v; want 20, smoothed rising", r.Raw, r.Value)
	}
	if s := sampleOf(t, out, ForegroundLatencySeconds); !near(s.Raw, 20*ms) || !near(s.Value, 20*ms) {
		t.Fatalf("foreground_latency_seconds %v (raw %v); want 20 ms", s.Value, s.Raw)
	}
	// A failure fails both, with no value, and forgets the probes.
	out = f.failed(at, ErrCanary)
	for _, s := range out {
		if !errors.Is(s.Err, ErrCanary) || s.Value != 0 || s.Raw != 0 {
			t.Fatalf("failed probe: %+v; want the error and no value", s)
		}
	}
	out, _ = feed(f, at.Add(250*time.Millisecond), false, 2)
	if r := sampleOf(t, out, ForegroundLatency); !near(r.Raw, 2) {
		t.Fatalf("ratio after a failure: %v; want the new probe's 2", r.Raw)
	}
	if !near(f.base, 1*ms) {
		t.Fatalf("baseline moved while jobs worked: %v ms", f.base/ms)
	}
}

func TestForegroundLatencyConfig(t *testing.T) {
	base := Config{PrimaryDSN: "postgres://u@h/db", Cores: 2}
	on := base
	on.ForegroundLatency, on.ForegroundLatencyWindow = true, 150*time.Millisecond
	if _, err := New(on); err == nil || !strings.Contains(err.Error(), "ForegroundLatencyWindow 150ms must hold at least 20 probes, one every ForegroundLatencyInterval 50ms") {
		t.Fatalf("New with a 3-probe window: %v; want an error naming ForegroundLatencyWindow and the interval", err)
	}
	slow := on
	slow.ForegroundLatencyWindow, slow.ForegroundLatencyInterval = 0, 3*time.Second
	if _, err := New(slow); err == nil || !strings.Contains(err.Error(), "ForegroundLatencyInterval 3s must be shorter than MaxAge 3s") {
		t.Fatalf("a canary as slow as MaxAge: %v; want an error naming ForegroundLatencyInterval", err)
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
	if p, err = New(on); err != nil || p.canary == nil || p.cfg.ForegroundLatencyWindow != DefaultForegroundLatencyWindow ||
		p.cfg.ForegroundLatencyInterval != DefaultForegroundLatencyInterval {
		t.Fatalf("New with the canary on: %v; want a canary with the default window and interval", err)
	}
	neg := on
	neg.ForegroundLatencyWindow = -time.Second
	if _, err := New(neg); err == nil || !strings.Contains(err.Error(), "ForegroundLatencyWindow must not be negative") {
		t.Fatalf("negative window: %v", err)
	}
}

func newHeldForeground() *foreground {
	return &foreground{window: time.Minute, held: true, smooth: ewma{tau: time.Second}}
}

// With the held baseline, what the jobs leave behind between their
// batches counts against them: probes slowed by half, busy or not, read
// 1.5, where the interleaved baseline, learnt from the slowed job-free
// probes, reads 1.
func TestHeldBaselineCountsWhatTheJobsLeaveBehind(t *testing.T) {
	h, g := newHeldForeground(), newForeground()
	out, at := feed(h, t0, true, repeat(1, heldProbes-1)...)
	r := sampleOf(t, out, ForegroundLatency)
	if !errors.Is(r.Err, ErrBaselineWarmup) || !strings.Contains(r.Err.Error(), "measuring it with the jobs held: 19 of 20 job-free probes in a row (0 more") {
		t.Fatalf("held baseline after 19 probes: %+v; want ErrBaselineWarmup saying 19 of 20", r)
	}
	out, _ = feed(h, at, true, 1)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(h.base, 1*ms) {
		t.Fatalf("held baseline after 20 job-free probes: %+v, base %v ms; want known, 1 ms", r, h.base/ms)
	}
	_, gat := feed(g, t0, true, repeat(1, heldProbes)...)
	at = gat
	// The jobs work: one probe in four sees a job at work, and every
	// probe is half again as slow.
	var hout, gout []Sample
	for range 20 {
		hout, _ = feed(h, at, false, 1.5)
		gout, at = feed(g, at, false, 1.5)
		for range 3 {
			hout, _ = feed(h, at, true, 1.5)
			gout, at = feed(g, at, true, 1.5)
		}
	}
	if r := sampleOf(t, gout, ForegroundLatency); !near(r.Raw, 1) {
		t.Fatalf("interleaved baseline: ratio %v; want 1 (its baseline rose with the jobs)", r.Raw)
	}
	if r := sampleOf(t, hout, ForegroundLatency); !near(r.Raw, 1.5) || !near(h.base, 1*ms) {
		t.Fatalf("held baseline: ratio %v, base %v ms; want 1.5 against the 1 ms measured before the jobs", r.Raw, h.base/ms)
	}
}

// The held baseline expires after the window: the ratio is unknown (a
// required rule holds the jobs) while ten probes settle and twenty
// job-free ones measure it again; a probe that sees a job at work, or a
// failed one, starts the measurement over.
func TestHeldBaselineIsMeasuredAgainAfterTheWindow(t *testing.T) {
	f := newHeldForeground()
	_, at := feed(f, t0, true, repeat(1, heldProbes)...)
	out, at := feed(f, at.Add(time.Minute), false, 2)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("a minute after the baseline: %+v; want it unknown", r)
	}
	// Settling: the first ten job-free probes do not count.
	_, at = feed(f, at, true, repeat(3, settleProbes)...)
	out, at = feed(f, at, true, repeat(1.2, heldProbes-1)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("19 probes after settling: %+v; want still measuring", r)
	}
	// A job at work starts it over, settling included.
	_, at = feed(f, at, false, 1.2)
	out, at = feed(f, at, true, repeat(1.2, settleProbes+heldProbes-1)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) || !strings.Contains(r.Err.Error(), "19 of 20") {
		t.Fatalf("after a busy probe, ten to settle and 19: %+v; want still measuring, 19 of 20", r)
	}
	// So does a failure.
	f.failed(at, ErrCanary)
	out, at = feed(f, at, true, repeat(1.2, heldProbes-1)...)
	if r := sampleOf(t, out, ForegroundLatency); !errors.Is(r.Err, ErrBaselineWarmup) {
		t.Fatalf("19 probes after a failure: %+v; want still measuring", r)
	}
	out, _ = feed(f, at, true, 1.2)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(f.base, 1.2*ms) || !near(r.Raw, 1) {
		t.Fatalf("twenty job-free probes after settling: %+v, base %v ms; want 1.2 ms, the settling probes' 3 ms left out", r, f.base/ms)
	}
}

// The canary protects a foreground that exists: with no foreground
// session seen in the span, the canary's own stretch (its commit queued
// behind the job's) reads 1; the first probe that sees a user brings the
// ratio back.
func TestForegroundRatioIsOneWithNoForegroundSession(t *testing.T) {
	f := newForeground()
	at := t0
	for range 20 { // the baseline: 1 ms, job-free, nobody else
		f.addProbe(1*ms, true, false, at)
		at = at.Add(50 * time.Millisecond)
	}
	var out []Sample
	for range 40 { // the job at work, each probe stretched to 3 ms, nobody else
		out = f.addProbe(3*ms, false, false, at)
		at = at.Add(50 * time.Millisecond)
	}
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || r.Raw != 1 {
		t.Fatalf("stretched 3x with no foreground session: %+v; want a ratio of 1", r)
	}
	out = f.addProbe(3*ms, false, true, at) // a user commits
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(r.Raw, 3) {
		t.Fatalf("stretched 3x with a foreground session: %+v; want 3", r)
	}
}

// One probe that queued behind one commit is one reading, not the
// foreground's latency: the span's slowest probe is left out of the mean.
// Two slow probes are not.
func TestForegroundOneSlowProbeIsLeftOut(t *testing.T) {
	f := newForeground()
	_, at := feed(f, t0, true, repeat(1, 30)...)
	out, at := feed(f, at, true, 400)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(r.Raw, 1) {
		t.Fatalf("one 400 ms probe among 1 ms ones: ratio %+v; want 1", r)
	}
	out, _ = feed(f, at, false, 400)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || r.Raw < 5 {
		t.Fatalf("two 400 ms probes within the span: ratio %+v; want well over the target", r)
	}
}

// With Config.ForegroundLatencyTail the ratio compares the slowest fifth
// of the span's probes with the slowest fifth of the job-free ones: a job
// that slows one probe in ten fivefold reads 3 (eight slowest: four at 5
// ms, four at 1), where the mean without its slowest reads 51/39.
func TestForegroundTailSeesWhatTheMeanMisses(t *testing.T) {
	mean, tail := newForeground(), newForeground()
	tail.tail = true
	_, at := feed(mean, t0, true, repeat(1, 40)...)
	feed(tail, t0, true, repeat(1, 40)...)
	var mout, tout []Sample
	for range 4 {
		mout, _ = feed(mean, at, false, 5)
		tout, at = feed(tail, at, false, 5)
		for range 9 {
			mout, _ = feed(mean, at, true, 1)
			tout, at = feed(tail, at, true, 1)
		}
	}
	if r := sampleOf(t, mout, ForegroundLatency); !near(r.Raw, 51.0/39) {
		t.Fatalf("mean: ratio %v; want 51/39", r.Raw)
	}
	if r := sampleOf(t, tout, ForegroundLatency); !near(r.Raw, 3) || !near(tail.tailBase, 1*ms) || !near(tail.base, 1*ms) {
		t.Fatalf("tail: ratio %v, tail baseline %v ms, baseline %v ms; want 3 against 1 ms", r.Raw, tail.tailBase/ms, tail.base/ms)
	}
	// The latency sample is the mean either way.
	if m, tl := sampleOf(t, mout, ForegroundLatencySeconds), sampleOf(t, tout, ForegroundLatencySeconds); !near(m.Value, tl.Value) {
		t.Fatalf("latency %v and %v; want the same mean", m.Value, tl.Value)
	}
}

// The held baseline measures the tail's too, from the run of job-free
// probes that measured it.
func TestHeldBaselineMeasuresTheTail(t *testing.T) {
	h := newHeldForeground()
	h.tail = true
	lats := repeat(1, heldProbes)
	lats[3], lats[11], lats[17], lats[19] = 2, 2, 3, 3 // slowest fifth: 3, 3, 2, 2
	out, _ := feed(h, t0, true, lats...)
	if r := sampleOf(t, out, ForegroundLatency); r.Err != nil || !near(h.tailBase, 2.5*ms) || !near(h.base, 1.3*ms) {
		t.Fatalf("held: %+v, tail baseline %v ms, baseline %v ms; want 2.5 and 1.3", r, h.tailBase/ms, h.base/ms)
	}
}

func TestSlowestFifth(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{4}, 4},
		{[]float64{3, 1}, 2},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 9.5},
		{[]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1, 1}, 9}, // 15 values: the slowest 3
	} {
		if got := slowestFifth(slices.Clone(c.in)); !near(got, c.want) {
			t.Errorf("slowestFifth(%v) = %v; want %v", c.in, got, c.want)
		}
	}
}
