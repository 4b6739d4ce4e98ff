package throttle

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// one NaN reading of an *optional* replica's lag turns the budget into
// NaN, for good.
func TestEdgeNaNSamplePoisonsBudget(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.3, used: 0.3})
	f.steps(5, world{load: 0.3, used: 0.3, lag: math.NaN()})
	d := f.steps(20, world{load: 0.3, used: 0.3})
	if math.IsNaN(d.Budget) || d.Budget <= 0 || d.Budget > 100 {
		t.Fatalf("20 healthy ticks after 5 NaN samples: budget %v (%s)", d.Budget, d.Reason)
	}
}

// NaN in primary_load's raw value hides a critical run.
func TestEdgeNaNRawResetsCriticalCount(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	for i := 0; i < 6; i++ {
		raw := 1.2
		if i%2 == 1 {
			raw = math.NaN()
		}
		f.step(world{load: 0.9, raw: raw, used: 0.3})
	}
	if f.last.Mode != status.ModeCritical {
		t.Fatalf("3 critical samples interleaved with unreadable (NaN) ones: mode %s budget %v", f.last.Mode, f.last.Budget)
	}
}

// the same raw sample seen on two ticks (sampler one tick late, still
// within max_age) counts as "two raw samples in a row" and cuts.
func TestEdgeRepeatedSampleCountsTwiceForRawOver(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	before := f.last.Budget
	f.tick++
	s := snap(at(f.tick), world{load: 0.5, raw: 0.8, used: 0.3}) // one raw sample at 1.14x target
	f.last = f.c.Step(at(f.tick), s)
	f.tick++
	f.last = f.c.Step(at(f.tick), s) // same sample, 1 s old
	if f.last.Budget < before {
		t.Fatalf("one raw sample over target, seen twice, cut %v -> %v (%s)", before, f.last.Budget, f.last.Reason)
	}
}

// an emergency cut is applied again on the same sample.
func TestEdgeEmergencyCutRepeatedOnSameSample(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	before := f.last.Budget
	f.tick++
	s := snap(at(f.tick), world{load: 0.5, raw: 1.2, used: 0.3})
	for range 3 { // sampler stalls; the sample ages 0, 1, 2 s (max_age 3 s)
		f.last = f.c.Step(at(f.tick), s)
		f.tick++
	}
	if f.last.Budget < before*0.25-1e-9 {
		t.Fatalf("one emergency sample cut %v -> %v (%s)", before, f.last.Budget, f.last.Reason)
	}
}

// while batch errors bind, replica lag at 5x target gets no emergency
// cut, and its cuts stop at the error floor (a quarter of the budget).
func TestEdgeErrorsSuppressLagEmergency(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.3, used: 0.3, lag: 0.5})
	before := f.last.Budget
	for range 20 {
		for range 30 {
			f.c.Report("purge", Feedback{Err: errors.New("lock timeout")})
		}
		f.step(world{load: 0.3, used: 0.3, lag: 10})
	}
	if f.last.Budget > before*0.05 {
		t.Fatalf("20 ticks with lag at 5x target (and failing batches): budget %v -> %v (%s)", before, f.last.Budget, f.last.Reason)
	}
}

// at a small budget the error window never holds MinErrorBatches, so
// batches that all fail never cut; the budget even grows.
func TestEdgeAllBatchesFailingAtLowBudget(t *testing.T) {
	f := setup(t, Config{MaxBudget: 10, InitialBudget: 1})
	var maxB float64
	for range 120 {
		for j, jd := range f.last.Jobs {
			for range int(math.Ceil(jd.Rate)) {
				f.c.Report(j, Feedback{Err: errors.New("deadlock")})
			}
		}
		f.tick++
		f.last = f.c.Step(at(f.tick), snap(at(f.tick), world{load: 0.3, used: 0.3}))
		maxB = max(maxB, f.last.Budget)
	}
	if maxB > 1 {
		t.Fatalf("every batch failed, yet the budget reached %v (now %v, %s)", maxB, f.last.Budget, f.last.Reason)
	}
}

// a sample stamped in the future (clock skew) is never stale.
func TestEdgeFutureSampleNeverStale(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	s := snap(at(1), world{load: 0.3, used: 0.3})
	for i := range s.Samples {
		s.Samples[i].At = at(1).Add(time.Hour)
	}
	var d Decision
	for i := 1; i <= 60; i++ { // the sampler died; its last samples say +1h
		d = f.c.Step(at(i), s)
	}
	if d.Mode != status.ModeStale || d.Budget != 0 {
		t.Fatalf("60 s with no new sample (stamped 1h ahead): mode %s budget %v", d.Mode, d.Budget)
	}
}

// New accepts a headroom rule whose resume level is above 1 (all slots
// free): the critical pause can never end.
func TestEdgeUnreachableResumeLevelAccepted(t *testing.T) {
	_, err := New(Config{Rules: map[signals.Name]Rule{signals.ConnectionHeadroom: {Target: 0.9, Critical: 0.6, Required: true}}})
	if err == nil {
		t.Fatal("accepted connection_headroom critical 0.6 with ResumeLevel 0.5: resume needs free > 1.2")
	}
}

// the quiet period's doubling overflows for a long QuietPeriod.
func TestEdgeQuietPeriodOverflow(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60, QuietPeriod: time.Duration(1 << 62), LatchAfter: 5})
	f.steps(3, world{load: 0.5, used: 0.3})
	f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3})
	f.c.critical.quiet = 0 // first pause: pretend it ended
	f.steps(2, world{load: 0.2, used: 0.3})
	if d := f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3}); d.Mode != status.ModeCritical { // second pause
		t.Fatalf("second pause did not start: %s", d.Reason)
	}
	if d := f.steps(2, world{load: 0.2, used: 0.3}); d.Mode != status.ModeCritical {
		t.Fatalf("second critical pause ended after 2 s (quiet %v)", f.c.critical)
	}
}

// a critical run is not consecutive across a stale gap.
func TestEdgeCriticalCountSurvivesStaleGap(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	f.steps(2, world{load: 0.9, raw: 1.1, used: 0.3})
	f.steps(300, world{load: 0.5, used: 0.3, loadErr: errors.New("timeout")})
	if d := f.step(world{load: 0.9, raw: 1.1, used: 0.3}); d.Mode == status.ModeCritical {
		t.Fatal("2 critical samples, 5 min unreadable, 1 critical sample: paged as 3 consecutive")
	}
}

// resuming from a primary_load critical ignores another signal that is
// at its critical level right now.
func TestEdgeResumeIgnoresOtherCriticalSignal(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60})
	f.steps(3, world{load: 0.5, used: 0.3})
	f.steps(3, world{load: 0.9, raw: 1.2, used: 0.3}) // primary_load critical
	for range 40 {
		// load quiet, but only 3 % of connection slots free (critical 5 %)
		if d := f.step(world{load: 0.2, used: 0.97}); d.Mode != status.ModeCritical {
			t.Fatalf("resumed (%s, budget %v) with connection_headroom at critical", d.Mode, d.Budget)
		}
	}
}
