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

// twoCores is the default rules with primary_load read on 2 cores: the
// raw reading moves in steps of 0.5.
func twoCores() map[signals.Name]Rule {
	r := DefaultRules()[signals.PrimaryLoad]
	r.Resolution = 0.5
	return map[signals.Name]Rule{signals.PrimaryLoad: r}
}

// On 2 cores the job plus one foreground statement on CPU read 1.0, 1.43x
// the target, while the averaged load was half of it: one such sample cut
// the budget by 75 %, three times a run. One step of quantization is not
// evidence; a sample past the level even one session lower is, and so
// are two samples in a row.
func TestEmergencyCutNeedsMoreThanOneQuantizedStep(t *testing.T) {
	f := setup(t, Config{MaxBudget: 10, InitialBudget: 10, Rules: twoCores()})
	f.steps(3, world{load: 0.4, used: 0.3})
	before := f.last.Budget
	d := f.step(world{load: 0.45, raw: 1.0, used: 0.3})
	if d.Budget < before*0.5 || strings.Contains(d.Reason, "emergency") {
		t.Fatalf("one sample one session up cut %v -> %v (%s)", before, d.Budget, d.Reason)
	}
	f.steps(3, world{load: 0.4, used: 0.3})

	// Nor are two in a row: the replay on this 2-core machine showed the
	// cleanup's own session plus one foreground statement reading 1.0 at
	// two ticks in a row often enough to cut by 75 % with the smoothed
	// load at 0.2-0.4, after which the job ran at a tenth of its rate for
	// the rest of the run. Nor do such samples stop growth.
	before = f.last.Budget
	f.step(world{load: 0.3, raw: 1.0, used: 0.3})
	d = f.step(world{load: 0.3, raw: 1.0, used: 0.3})
	if d.Budget < before*0.9 || strings.Contains(d.Reason, "emergency") {
		t.Fatalf("two samples one session up in a row on 2 cores cut %v -> %v (%s)", before, d.Budget, d.Reason)
	}

	// (Three in a row at 1.0 are a critical reading on 2 cores: both
	// cores busy at three ticks.)
	grow := setup(t, Config{MaxBudget: 100, InitialBudget: 10, Rules: twoCores()})
	grow.steps(3, world{load: 0.3, used: 0.3})
	before = grow.last.Budget
	for range 4 {
		for _, raw := range []float64{1.0, 1.0, 0.5} {
			if d = grow.step(world{load: 0.3, raw: raw, used: 0.3}); strings.Contains(d.Reason, "emergency") || d.Mode != status.ModeRunning {
				t.Fatalf("smoothed load at 0.43 of target, samples at 1.0 twice in a row on 2 cores: %s %s", d.Mode, d.Reason)
			}
		}
	}
	if d.Budget <= before {
		t.Fatalf("smoothed load at 0.43 of target, samples at 1.0 twice in a row on 2 cores: budget %v -> %v (%s); want growth", before, d.Budget, d.Reason)
	}

	// On 4 cores the same reading is three sessions over a step of 0.25,
	// over target even one session lower: two in a row are evidence.
	four := DefaultRules()[signals.PrimaryLoad]
	four.Resolution = 0.25
	h := setup(t, Config{MaxBudget: 10, InitialBudget: 10, Rules: map[signals.Name]Rule{signals.PrimaryLoad: four}})
	h.steps(3, world{load: 0.4, used: 0.3})
	before = h.last.Budget
	h.step(world{load: 0.45, raw: 1.0, used: 0.3})
	d = h.step(world{load: 0.5, raw: 1.0, used: 0.3})
	if !strings.Contains(d.Reason, "emergency cut by 75%") || !strings.Contains(d.Reason, "primary_load at 1.30 of target or more at 2 readings in a row (1.43, 1.43 of target") || d.Binding.String() != "primary_load" {
		t.Fatalf("two samples at 1.43x target in a row on 4 cores: %v -> %v, binding %q (%s)", before, d.Budget, d.Binding, d.Reason)
	}

	// The smoothed load over target still cuts on 2 cores.
	k := setup(t, Config{MaxBudget: 10, InitialBudget: 10, Rules: twoCores()})
	k.steps(3, world{load: 0.4, used: 0.3})
	before = k.last.Budget
	if d = k.step(world{load: 0.8, raw: 1.0, used: 0.3}); d.Budget >= before {
		t.Fatalf("smoothed load at 1.14x target on 2 cores: %v -> %v (%s); want a cut", before, d.Budget, d.Reason)
	}

	// One sample past the level even one session lower (three sessions
	// on 2 cores) is still one reading: at most an ordinary cut. The
	// second in a row is the evidence for an emergency, and the cut names
	// both readings.
	g := setup(t, Config{MaxBudget: 10, InitialBudget: 10, Rules: twoCores()})
	g.steps(3, world{load: 0.4, used: 0.3})
	before = g.last.Budget
	d = g.step(world{load: 0.5, raw: 1.5, used: 0.3})
	if d.Budget < before*0.5-1e-9 || strings.Contains(d.Reason, "emergency") {
		t.Fatalf("one sample at 1.5 on 2 cores: %v -> %v (%s); want at most an ordinary cut", before, d.Budget, d.Reason)
	}
	mid := d.Budget
	d = g.step(world{load: 0.6, raw: 1.5, used: 0.3})
	if math.Abs(d.Budget-mid*0.25) > 1e-9 || !strings.Contains(d.Reason, "emergency cut by 75%: primary_load at 1.30 of target or more at 2 readings in a row (2.14, 2.14 of target") {
		t.Fatalf("two samples at 1.5 on 2 cores: %v -> %v (%s)", mid, d.Budget, d.Reason)
	}
}

// The cut read "emergency cut by 75%: connection_headroom at 0.13 of
// target (a sample at 1.43)": the 1.43 was primary_load's sample, and the
// message named the signal with the highest smoothed pressure instead.
func TestEmergencyCutNamesTheSignalWhoseSampleCausedIt(t *testing.T) {
	f := setup(t, Config{MaxBudget: 10, InitialBudget: 10})
	// Headroom: 15 % free of a 10 % target is pressure 0.67, above
	// primary_load's smoothed 0.1/0.7 = 0.14.
	f.steps(3, world{load: 0.1, used: 0.85})
	f.step(world{load: 0.1, raw: 1.0, used: 0.85})
	d := f.step(world{load: 0.1, raw: 1.0, used: 0.85})
	if !strings.Contains(d.Reason, "emergency") {
		t.Fatalf("no emergency cut on two continuous samples at 1.43x: %s", d.Reason)
	}
	if d.Binding.String() != "primary_load" || !strings.Contains(d.Reason, "primary_load at 1.30 of target or more at 2 readings in a row (1.43, 1.43 of target") || strings.Contains(d.Reason, "connection_headroom") {
		t.Fatalf("binding %q, reason %q; want primary_load named, not connection_headroom", d.Binding, d.Reason)
	}
}

// After a surge the job ran at a quarter of its earlier rate for the
// last 30 s of a run with the load back at 0.1-0.2: growth crept back by
// 25 % every 3 s, then stopped at 90 % of the breach budget for a minute.
// Far under target it now doubles back to that level; near the target it
// still grows by at most 25 % a step.
func TestBudgetGrowsBackWithinSecondsAfterACut(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.3, used: 0.1})
	before := f.last.Budget
	f.step(world{load: 0.5, raw: 1.0, used: 0.1})
	d := f.step(world{load: 0.5, raw: 1.0, used: 0.1}) // a surge, two readings: emergency cut
	if d.Budget > before*0.3 {
		t.Fatalf("surge: %v -> %v (%s)", before, d.Budget, d.Reason)
	}
	cutAt := f.tick
	for f.last.Budget < 0.9*before-1e-9 && f.tick-cutAt < 60 {
		f.step(world{load: 0.1, used: 0.1})
	}
	if took := time.Duration(f.tick-cutAt) * time.Second; took > 10*time.Second {
		t.Fatalf("took %s to grow back to 90%% of %v at a tenth of the target; want seconds", took, before)
	}

	// Near the target (0.6/0.7 = 0.86 of it) recovery stays slow.
	g := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	g.steps(3, world{load: 0.3, used: 0.1})
	g.steps(2, world{load: 0.5, raw: 1.0, used: 0.1})
	prev := g.last.Budget
	for range 20 {
		d := g.step(world{load: 0.6, used: 0.1})
		if d.Budget > prev*1.25+1e-9 {
			t.Fatalf("near target grew %v -> %v, more than 25%%", prev, d.Budget)
		}
		prev = d.Budget
	}
}

// On an idle server exec printed "running binding connection_headroom"
// with headroom at 0.11 of its target: the signal with the highest
// pressure was named though nothing bound. It is named only when it
// limits the budget; otherwise the reason says what does.
func TestBindingIsNamedOnlyWhenItLimits(t *testing.T) {
	idle := world{load: 0.02, used: 0.1} // headroom at 0.11 of target
	f := setup(t, Config{MaxBudget: 10, InitialBudget: 10})
	d := f.steps(3, idle)
	if d.Mode != status.ModeRunning || !d.Binding.IsZero() || !strings.Contains(d.Reason, "max_rate") {
		t.Fatalf("at MaxBudget on an idle server: mode %s, binding %q, reason %q; want no binding, max_rate named", d.Mode, d.Binding, d.Reason)
	}

	g := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	for range 5 {
		g.tick++
		d = g.c.Step(at(g.tick), snap(at(g.tick), idle)) // nobody uses the budget
	}
	if !d.Binding.IsZero() || !strings.Contains(d.Reason, "low utilization") {
		t.Fatalf("unused budget: binding %q, reason %q", d.Binding, d.Reason)
	}

	h := setup(t, Config{MaxBudget: 100, InitialBudget: 10, PreviousBudget: 80})
	h.step(idle)
	if d = h.step(idle); !d.Binding.IsZero() || !strings.Contains(d.Reason, "inherited budget") {
		t.Fatalf("taking over: binding %q, reason %q", d.Binding, d.Reason)
	}

	// Near the target the signal does limit the growth, and is named.
	k := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	if d = k.steps(3, world{load: 0.6, used: 0.1}); d.Binding.String() != "primary_load" {
		t.Fatalf("at 0.86 of target: binding %q, reason %q", d.Binding, d.Reason)
	}
}

// A job at 0.005 batches/s showed as "running" at 0.0/s: it waits
// minutes for each batch. Under SlowRate it is throttled, saying so.
func TestJobTooSlowToStartABatchIsThrottled(t *testing.T) {
	f := setup(t, Config{MaxBudget: 10, InitialBudget: 0.05, MinBudget: 0.01})
	d := f.step(world{load: 0.02, used: 0.1})
	jd := d.Jobs["purge"]
	if jd.Rate <= 0 || jd.Rate >= status.SlowRate {
		t.Fatalf("rate %v; the test needs a positive rate under %v", jd.Rate, status.SlowRate)
	}
	if jd.State != status.JobThrottled || !strings.Contains(jd.Reason, "one batch every 20s") {
		t.Fatalf("job at %v/s: %s %q; want throttled, saying how often a batch starts", jd.Rate, jd.State, jd.Reason)
	}
}

// After a leader took over a critical pause the reason read "critical:
// primary_load reached 0 (critical 1)": the reading was not carried.
func TestInheritedCriticalPauseNamesItsReading(t *testing.T) {
	first := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	first.steps(3, world{load: 0.3, used: 0.1})
	first.steps(3, world{load: 1.2, raw: 1.5, used: 0.1})
	cs := first.c.Critical()
	if cs == nil || cs.Value != 1.5 || cs.Threshold != 1 {
		t.Fatalf("published critical state %+v; want value 1.5, threshold 1", cs)
	}
	next := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Inherited: cs})
	d := next.step(world{load: 0.3, used: 0.1})
	if d.Mode != status.ModeCritical || !strings.Contains(d.Reason, "primary_load reached 1.5 (critical 1)") {
		t.Fatalf("taken over: %s %q; want the reading 1.5 named", d.Mode, d.Reason)
	}
	// From a leader that did not publish the reading: say so, never 0.
	old := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Inherited: &CriticalState{Signal: status.Binding{Signal: signals.PrimaryLoad}, Since: c0, Budget: 40}})
	if d = old.step(world{load: 0.3, used: 0.1}); strings.Contains(d.Reason, "reached 0") || !strings.Contains(d.Reason, "unknown") {
		t.Fatalf("unknown reading: %q", d.Reason)
	}
	// The quiet the last leader saw counts on.
	quiet := setup(t, Config{MaxBudget: 100, InitialBudget: 40, QuietPeriod: 30 * time.Second,
		Inherited: &CriticalState{Signal: status.Binding{Signal: signals.PrimaryLoad}, Since: c0, Value: 1.5, Threshold: 1, Budget: 40, QuietSince: at(-29)}})
	if d = quiet.step(world{load: 0.1, used: 0.1}); d.Mode == status.ModeCritical {
		quiet.step(world{load: 0.1, used: 0.1})
	}
	if d = quiet.step(world{load: 0.1, used: 0.1}); d.Mode == status.ModeCritical {
		t.Fatalf("quiet for 31 s across a takeover, still %s: %s", d.Mode, d.Reason)
	}
}

// Ten leaders that each took over within seconds cut the cluster's
// budget from 5 to 0.016 batches/s: each started at a quarter of the last
// one's. On a healthy primary a takeover starts no lower than
// InitialBudget.
func TestRepeatedTakeoversDoNotRatchetTheBudget(t *testing.T) {
	cfg := Config{MaxBudget: 10, InitialBudget: 1}
	published := 5.0
	for i := range 10 {
		cfg.PreviousBudget = published
		f := setup(t, cfg, JobConfig{Name: "x"}, JobConfig{Name: "y"})
		d := f.step(world{load: 0.05, used: 0.1})
		if d.Budget < cfg.InitialBudget {
			t.Fatalf("leader %d: budget %v from %v published; want at least InitialBudget %v", i+1, d.Budget, published, cfg.InitialBudget)
		}
		published = d.Budget
	}
	// A low budget published on a loaded primary is kept: what cut it is
	// still there.
	cfg.PreviousBudget = 0.1
	f := setup(t, cfg)
	if d := f.step(world{load: 0.6, used: 0.1}); d.Budget > 0.1*1.25+1e-9 {
		t.Fatalf("took over at %v on a loaded primary from 0.1; want no more", d.Budget)
	}
}

// A critical pause that began with the budget already cut to its floor
// was not the jobs' doing: once the load is gone the budget doubles back
// as after any pause, instead of probing by 2 % a step above the floor for
// BreachMemory.
func TestACriticalBegunAtTheFloorDoesNotCapRecovery(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, MinBudget: 0.1, QuietPeriod: 5 * time.Second})
	var d Decision
	for range 60 { // someone else's load, over target: cut to the floor
		d = f.step(world{load: 0.95})
	}
	if d.Budget > 0.2 {
		t.Fatalf("after a minute over target the budget is %v; want it at the floor", d.Budget)
	}
	for range 5 {
		d = f.step(world{load: 1.2})
	}
	if d.Mode != status.ModeCritical {
		t.Fatalf("mode %s; want critical", d.Mode)
	}
	for range 10 {
		d = f.step(world{load: 0.05})
	}
	if d.Mode == status.ModeCritical {
		t.Fatalf("still critical after the quiet period: %s", d.Reason)
	}
	// A job that uses every token it gets, a fraction of a batch a tick
	// carried over.
	owed := 0.0
	for range 30 {
		owed += d.Jobs["purge"].Rate
		for ; owed >= 1; owed-- {
			f.c.Report("purge", Feedback{Rows: 100, Duration: 50 * time.Millisecond})
		}
		f.tick++
		d = f.c.Step(at(f.tick), snap(at(f.tick), world{load: 0.05}))
	}
	if d.Budget < 8 {
		t.Errorf("30 s after the load went: budget %v (%s); want it grown back toward the 10/s it had before", d.Budget, d.Reason)
	}
}

// A required signal still warming up when the controller starts (the
// foreground-latency canary learning its baseline) stops work, but there
// is nothing to come back to slowly: when it is ready the jobs start at
// the initial budget, not at SlowStart of it. In the replay the canary's
// first seconds left the job at a quarter of the initial budget, and it
// took the rest of the run to grow back. A stale signal after work has
// run still restarts slowly.
func TestAWarmUpAtStartIsNoPause(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	if d := f.steps(3, world{load: 0.2, used: 0.2, loadErr: errWarming}); d.Mode != status.ModeStale || d.Budget != 0 {
		t.Fatalf("a required signal warming up: %s at %v; want stale at 0", d.Mode, d.Budget)
	}
	if d := f.step(world{load: 0.2, used: 0.2}); d.Mode != status.ModeRunning || d.Budget != 10 {
		t.Fatalf("first fresh step after the warm-up: %s at %v (%s); want running at the initial 10", d.Mode, d.Budget, d.Reason)
	}
	f.steps(6, world{load: 0.2, used: 0.2})
	before := f.last.Budget
	f.steps(2, world{load: 0.2, used: 0.2, loadErr: errWarming})
	if d := f.step(world{load: 0.2, used: 0.2}); d.Budget != before*slowStartDefault {
		t.Fatalf("fresh again after a stale spell mid-run: %v; want %v, a slow start from %v", d.Budget, before*slowStartDefault, before)
	}
}

var errWarming = errors.New("warming up")

// slowStartDefault is Config.SlowStart's default.
const slowStartDefault = 0.25
