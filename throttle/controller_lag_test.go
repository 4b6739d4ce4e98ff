package throttle

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// lagged is a controller pacing on replica1's lag (target 2 s) beside the
// default rules.
func lagged(t *testing.T) *fixture {
	return setup(t, Config{MaxBudget: 100, InitialBudget: 40, Replicas: map[string]ReplicaPolicy{"replica1": ReplicaRequired}})
}

// Replica lag integrates: a cut shows in it only as the backlog drains.
// In the simulator's replica-slow scenario the controller cut by 75 % at
// three ticks in a row, the last on a lag already falling, leaving 1/64
// of the budget. An emergency cut on lag now repeats at the next tick only
// when the lag is worse than at the last cut; primary_load, which answers
// a cut within a tick, still cuts again.
func TestLagEmergencyCutIsNotRepeatedOnAFallingLag(t *testing.T) {
	f := lagged(t)
	f.steps(3, world{load: 0.3, used: 0.1})
	f.step(world{load: 0.3, used: 0.1, lag: 3.0}) // 1.5x target: one reading
	before := f.last.Budget
	d := f.step(world{load: 0.3, used: 0.1, lag: 3.0}) // two in a row
	if math.Abs(d.Budget-before/4) > 1e-9 || !strings.Contains(d.Reason, "emergency") {
		t.Fatalf("lag at 1.5x target twice: %v -> %v (%s); want an emergency cut", before, d.Budget, d.Reason)
	}
	cut := d.Budget
	d = f.step(world{load: 0.3, used: 0.1, lag: 2.8}) // 1.4x, falling
	if d.Budget < cut*0.9 || strings.Contains(d.Reason, "emergency") {
		t.Fatalf("lag falling at 1.4x target, a tick after the cut: %v -> %v (%s); want no second emergency cut", cut, d.Budget, d.Reason)
	}
	cut = d.Budget
	d = f.step(world{load: 0.3, used: 0.1, lag: 3.4}) // 1.7x, worse than at the cut
	if d.Budget > cut/4+1e-9 || !strings.Contains(d.Reason, "emergency") {
		t.Fatalf("lag rising past the last cut's: %v -> %v (%s); want another emergency cut", cut, d.Budget, d.Reason)
	}

	g := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	g.steps(3, world{load: 0.3, used: 0.1})
	g.steps(2, world{load: 0.3, raw: 1.05, used: 0.1}) // 1.5x target twice: emergency
	cut = g.last.Budget
	d = g.step(world{load: 0.35, raw: 0.98, used: 0.1}) // still 1.4x
	if d.Budget >= cut {
		t.Fatalf("primary_load still at 1.4x target a tick after an emergency cut: %v -> %v (%s); want it cut again", cut, d.Budget, d.Reason)
	}
	cut = d.Budget
	if d = g.step(world{load: 0.35, raw: 0.98, used: 0.1}); d.Budget > cut/4+1e-9 {
		t.Fatalf("primary_load at 1.4x target at two readings after an emergency cut: %v -> %v (%s); want another emergency cut", cut, d.Budget, d.Reason)
	}
}

// A budget past what the replica applies shows first as lag rising at
// every sample, long before the lag reaches its target. Growing on then
// only makes the breach later and the cut deeper: growth holds, naming the
// lag, and resumes once the lag stops rising. Lag rising from near zero
// (under a quarter of its target) is noise and holds nothing.
func TestRisingLagHoldsGrowth(t *testing.T) {
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 40, Replicas: map[string]ReplicaPolicy{"replica1": ReplicaRequired}})
	f.steps(3, world{load: 0.2, used: 0.1})
	for i, lag := range []float64{0.1, 0.2, 0.3, 0.4} {
		f.step(world{load: 0.2, used: 0.1, lag: lag})
		if strings.Contains(f.last.Reason, "rising") {
			t.Fatalf("step %d: lag %v s (under a quarter of the target) held growth: %s", i, lag, f.last.Reason)
		}
	}
	held := 0.0
	for i, lag := range []float64{0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8} {
		d := f.step(world{load: 0.2, used: 0.1, lag: lag})
		if i == 0 {
			held = d.Budget
		}
		if i >= 1 && (d.Budget != held || !strings.Contains(d.Reason, "rising") || !d.Binding.Equal(status.Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "replica1"}})) {
			t.Fatalf("lag rising at every sample to %v s: budget %v (held at %v), binding %q (%s)", lag, d.Budget, held, d.Binding, d.Reason)
		}
	}
	grew := false
	for range 6 {
		d := f.step(world{load: 0.2, used: 0.1, lag: 1.0})
		grew = grew || d.Budget > held
	}
	if !grew {
		t.Fatalf("lag steady at half its target for 6 s: budget still %v (%s); want growth again", f.last.Budget, f.last.Reason)
	}
}

// After a breach, growth comes back at once to 90 % of the budget the
// breach began at; for a breach of replica lag, which integrates and so
// breaches long after the budget passed a safe one, to 80 %. In the
// simulator's replica-slow scenario 90 % meant one breach after another
// (9.3 reversals in 10 minutes); 80 % halves them and does more work.
func TestLagBreachGrowsBackToLessThanALoadBreach(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breach world
		share  float64
	}{
		{"primary_load", world{load: 0.88, raw: 0.88, used: 0.1}, 0.9},
		{"replica lag", world{load: 0.2, used: 0.1, lag: 2.58}, 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lagged(t)
			f.steps(3, world{load: 0.2, used: 0.1})
			at := f.last.Budget
			f.step(tc.breach)
			f.steps(2, world{load: 0.2, used: 0.1})
			want := fmt.Sprintf("growing back toward %.3g/s", tc.share*at)
			for range 30 {
				if strings.Contains(f.last.Reason, want) {
					return
				}
				f.step(world{load: 0.2, used: 0.1})
			}
			t.Fatalf("after a breach at %v: %q; want it %s", at, f.last.Reason, want)
		})
	}
}

// After a cut, a smoothed reading still over target while every new raw
// sample reads under it is the smoothing lagging the cut: the budget
// holds, and cuts again only when a new sample is over target.
func TestSmoothingThatLagsACutDoesNotCutAgain(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.3, used: 0.1})
	f.steps(2, world{load: 1.05, raw: 1.05, used: 0.1}) // 1.5x target twice: emergency
	cut := f.last.Budget
	if cut >= 40 || !strings.Contains(f.last.Reason, "emergency") {
		t.Fatalf("primary_load at 1.5x target twice: budget %v (%s); want an emergency cut", cut, f.last.Reason)
	}
	for i := range 6 {
		// Smoothed 1.3x target, raw at a third of it.
		d := f.step(world{load: 0.9, raw: 0.25, used: 0.1})
		if d.Budget != cut || !strings.Contains(d.Reason, "new samples under target") {
			t.Fatalf("tick %d after the cut, smoothed over and raw under target: %v -> %v (%s); want it held", i+1, cut, d.Budget, d.Reason)
		}
	}
	if d := f.step(world{load: 0.9, raw: 0.95, used: 0.1}); d.Budget >= cut {
		t.Fatalf("a new sample over target again: %v -> %v (%s); want a cut", cut, d.Budget, d.Reason)
	}
	// Without a cut in this breach, a smoothed reading over target cuts
	// whatever the raw one says: it is the first answer to the breach.
	g := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	g.steps(3, world{load: 0.3, used: 0.1})
	before := g.last.Budget
	if d := g.step(world{load: 0.9, raw: 0.25, used: 0.1}); d.Budget >= before {
		t.Fatalf("smoothed over target, no cut yet: %v -> %v (%s); want a cut", before, d.Budget, d.Reason)
	}
}
