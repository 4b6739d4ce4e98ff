package throttle

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// stepSnap reports full use like step, then steps with s.
func (f *fixture) stepSnap(s signals.Snapshot) Decision {
	f.t.Helper()
	for j, jd := range f.last.Jobs {
		for range int(math.Round(jd.Rate)) {
			f.c.Report(j, Feedback{Rows: 100, Duration: 50 * time.Millisecond})
		}
	}
	f.tick++
	s.At = at(f.tick)
	f.last = f.c.Step(at(f.tick), s)
	return f.last
}

// growthDue steps at low load until the budget grows, then two more ticks:
// the next tick is one where growth would be due.
func growthDue(f *fixture) float64 {
	prev := f.step(world{load: 0.2, used: 0.3}).Budget
	for f.step(world{load: 0.2, used: 0.3}).Budget <= prev {
		prev = f.last.Budget
	}
	f.steps(2, world{load: 0.2, used: 0.3})
	return f.last.Budget
}

// a required signal with no new sample freezes growth even when jobs use their budget.
func TestGuardMissedTickFreeze(t *testing.T) {
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 10})
	before := growthDue(f)
	old := snap(at(f.tick), world{load: 0.2, used: 0.3}) // last tick's sample again
	if d := f.stepSnap(old); d.Budget > before {
		t.Fatalf("grew %v -> %v on a repeated sample", before, d.Budget)
	}
}

// an optional replica unknown freezes growth (jobs busy).
func TestGuardOptionalUnknownFreezes(t *testing.T) {
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 10})
	before := growthDue(f)
	s := snap(at(f.tick+1), world{load: 0.2, used: 0.3})
	s.Samples[2].Err = errors.New("missing")
	if d := f.stepSnap(s); d.Budget > before {
		t.Fatalf("grew %v -> %v while an optional replica is unknown", before, d.Budget)
	}
}

// a held job is not listed as running in a page.
func TestGuardHeldJobNotInPage(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	f.steps(3, world{load: 0.5, used: 0.3})
	holds["archive"] = true
	f.step(world{load: 0.5, used: 0.3})
	for range 3 {
		for _, e := range f.step(world{load: 0.9, raw: 1.1, used: 0.3}).Events {
			for _, jr := range e.Jobs {
				if jr.Job == "archive" {
					t.Fatalf("page lists held job archive at %v", jr.Rate)
				}
			}
		}
	}
}

// one critical sample seen on three ticks is one sample.
func TestGuardCriticalSameSampleOnce(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	s := snap(at(f.tick+1), world{load: 0.9, raw: 1.1, used: 0.3})
	for range 3 {
		f.tick++
		if d := f.c.Step(at(f.tick), s); d.Mode == status.ModeCritical {
			t.Fatal("one critical sample, seen three times, paused everything")
		}
	}
}

// quiet needs the smoothed value under the resume level too.
func TestGuardQuietNeedsSmoothed(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, raw: 1.1, used: 0.3})
	if d := f.steps(60, world{load: 0.6, raw: 0.3, used: 0.3}); d.Mode != status.ModeCritical {
		t.Fatal("resumed with the smoothed load over the resume level")
	}
}

// a job released from its own hold ramps from a quarter of its rate.
func TestGuardPerJobRamp(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	f.steps(3, world{load: 0.5, used: 0.3})
	before := f.last.Jobs["purge"].Rate
	holds["purge"] = true
	f.steps(2, world{load: 0.5, used: 0.3})
	delete(holds, "purge")
	if r := f.step(world{load: 0.5, used: 0.3}).Jobs["purge"].Rate; r > before*0.25+1e-9 {
		t.Fatalf("released job at %v; want at most a quarter of %v", r, before)
	}
}

// Resume skips the quiet period.
func TestGuardResumeSkipsQuiet(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60, QuietPeriod: 2 * time.Second})
	for range 3 {
		f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3})
		for f.step(world{load: 0.2, used: 0.3}).Mode == status.ModeCritical && !f.last.Latched {
		}
	}
	if !f.last.Latched {
		t.Fatal("not latched")
	}
	f.c.Resume(at(f.tick), "alice")
	if d := f.step(world{load: 0.2, used: 0.3}); d.Mode == status.ModeCritical {
		t.Fatalf("after Resume, under the resume level: %s", d.Reason)
	}
}

// critical pauses older than LatchWindow do not count toward the latch.
func TestGuardLatchWindowPrunes(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60, QuietPeriod: time.Second, LatchWindow: time.Minute})
	for range 3 {
		f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3})
		for f.step(world{load: 0.2, used: 0.3}).Mode == status.ModeCritical && !f.last.Latched {
		}
		f.steps(120, world{load: 0.2, used: 0.3})
	}
	if f.last.Latched {
		t.Fatal("three critical pauses two minutes apart latched with a one-minute window")
	}
}

// K21/K35: an idle job's share is lent to the busy one.
func TestGuardIdleShareLent(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40}, JobConfig{Name: "busy"}, JobConfig{Name: "idle"})
	var d Decision
	for range 10 {
		for range int(f.last.Jobs["busy"].Rate) {
			f.c.Report("busy", Feedback{Duration: time.Millisecond})
		}
		f.tick++
		d = f.c.Step(at(f.tick), snap(at(f.tick), world{load: 0.8, used: 0.3})) // hold the budget still
		f.last = d
	}
	if d.Jobs["busy"].Rate < 0.9*d.Budget {
		t.Fatalf("busy job gets %v of %v with the other idle", d.Jobs["busy"].Rate, d.Budget)
	}
}

// an ordinary cut removes at most MaxCut.
func TestGuardCutBounded(t *testing.T) {
	// Pressure 1.25 asks for a cut to 80 %; MaxCut 0.1 allows 10 %.
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, MaxCut: 0.1})
	before := f.steps(3, world{load: 0.5, used: 0.3}).Budget
	if d := f.step(world{load: 0.875, raw: 0.5, used: 0.3}); d.Budget < before*0.9-1e-9 || d.Budget >= before {
		t.Fatalf("cut %v -> %v at pressure 1.25 with MaxCut 0.1; want a cut of at most 10%%", before, d.Budget)
	}
}

// two raw samples over target in a row cut though the smoothed value is under.
func TestGuardTwoRawSamplesCut(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	before := f.steps(3, world{load: 0.5, used: 0.3}).Budget
	f.steps(2, world{load: 0.6, raw: 0.8, used: 0.3})
	if f.last.Budget >= before {
		t.Fatalf("two raw samples at 1.14x target: budget %v -> %v", before, f.last.Budget)
	}
}

// after a cut, the same pressure waits a tick for it to take effect.
func TestGuardCutSpacing(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.5, used: 0.3})
	cut := f.step(world{load: 0.84, raw: 0.6, used: 0.3}).Budget
	if d := f.step(world{load: 0.84, raw: 0.6, used: 0.3}); d.Budget != cut {
		t.Fatalf("cut again %v -> %v the next tick at the same pressure", cut, d.Budget)
	}
}

// A breach remembers the budget that breached, not the budget after the
// cut: the signal over target again before the budget has grown is the
// same breach going on, and the budget it finds is the cut's. Exec on an
// idle primary ratcheted down so, each cut becoming the next ceiling,
// to one batch every 51 s. After the pressure is gone the budget is back
// at 80 % of the budget that breached within 15 s, and probes past it
// after ProbeAfter of calm.
func TestGuardCeilingIsTheBudgetThatBreached(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 50})
	f.steps(3, world{load: 0.5, used: 0.3})
	breached := f.last.Budget
	f.step(world{load: 0.8, used: 0.3}) // breach at 50
	f.step(world{load: 0.5, used: 0.3})
	f.step(world{load: 0.8, used: 0.3}) // over again, at the cut budget
	f.step(world{load: 0.5, used: 0.3})
	f.step(world{load: 0.8, used: 0.3})
	calmAt := f.tick
	var back time.Duration
	for range 40 {
		d := f.step(world{load: 0.1, used: 0.3})
		calm := time.Duration(f.tick-calmAt) * time.Second
		if back == 0 && d.Budget >= 0.8*breached-1e-9 {
			back = calm
		}
		if calm < 20*time.Second && d.Budget > 0.9*breached+1e-9 {
			t.Fatalf("grew to %v %s into the calm, past 90%% of the %v that breached before ProbeAfter", d.Budget, calm, breached)
		}
	}
	if back == 0 || back > 15*time.Second {
		t.Fatalf("back at 80%% of the %v that breached after %s of calm (budget now %v, %s); want within 15 s", breached, back, f.last.Budget, f.last.Reason)
	}
	if f.last.Budget <= 0.9*breached+1e-9 {
		t.Fatalf("never probed past 90%% of the %v that breached in 40 s of calm: %v (%s)", breached, f.last.Budget, f.last.Reason)
	}

	// A breach at a budget grown back since the cut is a breach of its
	// own: it lowers the ceiling to the budget that breached then.
	g := setup(t, Config{MaxBudget: 100, InitialBudget: 50})
	g.steps(3, world{load: 0.5, used: 0.3})
	g.step(world{load: 0.8, used: 0.3}) // breach at 50
	for g.last.Budget < 0.9*50-1e-9 {
		g.step(world{load: 0.1, used: 0.3})
	}
	second := g.last.Budget
	g.step(world{load: 0.8, used: 0.3}) // breach again, at the grown budget
	for range 15 {
		if d := g.step(world{load: 0.1, used: 0.3}); d.Budget > 0.9*second+1e-9 {
			t.Fatalf("grew to %v within 15 s of a breach at %v", d.Budget, second)
		}
	}
}

// after a critical pause, a breach, growth stops short of the budget the
// breach began at for a while.
func TestGuardCeilingAfterCriticalPause(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, QuietPeriod: 5 * time.Second})
	before := f.steps(3, world{load: 0.3, used: 0.3}).Budget
	f.steps(3, world{load: 0.5, raw: 1.1, used: 0.3})
	if f.last.Mode != status.ModeCritical {
		t.Fatalf("mode %s", f.last.Mode)
	}
	ended := 0
	for range 60 {
		d := f.step(world{load: 0.3, used: 0.3})
		if ended == 0 && d.Mode != status.ModeCritical {
			ended = f.tick
		}
		if ended > 0 && f.tick-ended < 20 && d.Budget > 0.9*before+1e-9 {
			t.Fatalf("grew back to %v %d s after a critical pause at %v; want probing past 90 %% only after ProbeAfter", d.Budget, f.tick-ended, before)
		}
	}
}

// after a stale signal (no evidence against the earlier budget), work
// restarts at a quarter, doubles up to half of the budget before, then
// grows by at most MaxGrowth a step.
func TestSlowStartAfterStale(t *testing.T) {
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 40})
	before := f.steps(3, world{load: 0.1, used: 0.1}).Budget
	f.step(world{load: 0.1, used: 0.1, age: 5 * time.Second})
	prev := f.step(world{load: 0.1, used: 0.1}).Budget
	if math.Abs(prev-before/4) > 1e-9 {
		t.Fatalf("restarted at %v; want a quarter of %v", prev, before)
	}
	doubled := false
	for range 40 {
		d := f.step(world{load: 0.1, used: 0.1})
		if d.Budget > prev {
			ratio := d.Budget / prev
			switch {
			case prev < before/2 && ratio > 2+1e-9:
				t.Fatalf("grew %v -> %v under half of %v: more than doubling", prev, d.Budget, before)
			case prev >= before/2-1e-9 && ratio > 1.25+1e-9:
				t.Fatalf("grew %v -> %v past half of %v: more than 25%%", prev, d.Budget, before)
			case ratio > 1.25+1e-9:
				doubled = true
			}
		}
		prev = d.Budget
	}
	if !doubled {
		t.Fatal("never grew faster than 25% a step in slow start")
	}
	if prev <= before {
		t.Fatalf("after 40 s of calm the budget is %v, still under %v", prev, before)
	}
}

// growth tapers as pressure nears GrowBelow.
func TestGuardGrowthTapers(t *testing.T) {
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 10})
	prev := f.steps(1, world{load: 0.63, used: 0.3}).Budget // 0.9 of target
	for range 20 {
		d := f.step(world{load: 0.63, used: 0.3})
		if d.Budget > prev*0.95/0.9+1e-9 {
			t.Fatalf("grew %v -> %v at pressure 0.9", prev, d.Budget)
		}
		prev = d.Budget
	}
}

// a few failures among few batches (under MinErrorBatches) do not cut.
func TestGuardMinErrorBatches(t *testing.T) {
	c, _ := New(Config{MaxBudget: 100, InitialBudget: 40})
	_ = c.Register(JobConfig{Name: "purge"})
	for i := range 10 {
		var err error
		if i < 2 {
			err = errors.New("x")
		}
		c.Report("purge", Feedback{Err: err})
	}
	if d := c.Step(at(1), snap(at(1), world{load: 0.5, used: 0.3})); d.Budget < 40 {
		t.Fatalf("2 failures in 10 batches cut 40 -> %v", d.Budget)
	}
}

// a controller taking over from a leader starts at a quarter of its last
// budget and doubles back toward it.
func TestTakeOverStartsCautious(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, PreviousBudget: 80})
	d := f.step(world{load: 0.1, used: 0.1})
	if math.Abs(d.Budget-20) > 1e-9 {
		t.Fatalf("first budget %v; want a quarter of 80", d.Budget)
	}
	for f.last.Budget == 20 && f.tick < 5 {
		f.step(world{load: 0.1, used: 0.1})
	}
	if f.last.Budget != 40 {
		t.Fatalf("after one growth step: %v; want doubled to 40", f.last.Budget)
	}
	if _, err := New(Config{PreviousBudget: -1}); err == nil {
		t.Fatal("negative PreviousBudget accepted")
	}
}

// a job whose rate is too low to show use in the usage window is not
// idle: its share is not lent away (else it could never show use).
func TestSlowJobIsNotIdle(t *testing.T) {
	c, err := New(Config{MaxBudget: 0.4, InitialBudget: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []status.Job{"slow", "busy"} {
		if err := c.Register(JobConfig{Name: j}); err != nil {
			t.Fatal(err)
		}
	}
	var d Decision
	for i := 1; i <= 20; i++ {
		c.Report("busy", Feedback{Duration: time.Millisecond})
		d = c.Step(at(i), snap(at(i), world{load: 0.1, used: 0.1}))
	}
	if d.Jobs["slow"].Rate < 0.1 {
		t.Fatalf("slow job's rate %v of a 0.4 budget: treated as idle", d.Jobs["slow"].Rate)
	}
}

// Twenty workers of one job shared a budget cut to 0.8/s: each waited
// 25 s for its first token, so no batch showed use, the job was lent away
// as idle (0.01/s left, a batch every 100 s), and the unused budget never
// grew. A job whose callers wait for its limiter wants more: it is not
// idle, its rate counts as used, and the budget grows back.
func TestAJobWaitingForItsLimiterIsNeitherIdleNorUnused(t *testing.T) {
	run := func(wanted bool) Decision {
		f := setup(t, Config{MaxBudget: 100, InitialBudget: 0.8, MinBudget: 0.01})
		var d Decision
		for i := 1; i <= 10; i++ {
			if wanted {
				f.c.Wanted("purge")
			}
			f.c.Wanted("unknown") // ignored
			d = f.c.Step(at(i), snap(at(i), world{load: 0.05, used: 0.1}))
		}
		return d
	}
	unused := run(false)
	if unused.Jobs["purge"].Rate > 0.1 || unused.Budget > 0.8 || !strings.Contains(unused.Reason, "low utilization") {
		t.Fatalf("no batch and no waiter: rate %v of budget %v, reason %q; want lent away, low utilization", unused.Jobs["purge"].Rate, unused.Budget, unused.Reason)
	}
	d := run(true)
	if d.Jobs["purge"].Rate < 1.5*0.8 || strings.Contains(d.Reason, "low utilization") {
		t.Fatalf("a waiting job: rate %v of budget %v, reason %q; want the budget grown and given to it", d.Jobs["purge"].Rate, d.Budget, d.Reason)
	}
}
