package throttle

import (
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// Every decision carries a reason code for each job, produced where the
// reason's text is, so nothing downstream has to parse the text.
func TestDecisionsCarryReasonCodes(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive", MaxRate: 2})
	calm := world{load: 0.2, used: 0.1}
	check := func(what string, d Decision, job status.Job, state status.JobState, code status.Code) {
		t.Helper()
		jd := d.Jobs[job]
		if jd.State != state || jd.Code != code {
			t.Fatalf("%s: %s is %s/%s (%q); want %s/%s", what, job, jd.State, jd.Code, jd.Reason, state, code)
		}
	}

	d := f.steps(3, calm)
	check("calm, starting", d, "purge", status.JobRunning, status.CodeSlowStart)
	check("calm", d, "archive", status.JobRunning, status.CodeMaxRate)

	d = f.step(world{load: 1.0, raw: 0.95, used: 0.1}) // over the 0.7 target
	check("over target", d, "purge", status.JobThrottled, status.CodeCut)
	if d.Code != status.CodeCut || d.Mode != status.ModeThrottled {
		t.Fatalf("over target: decision %s/%s; want throttled/cut", d.Mode, d.Code)
	}

	holds["purge"] = true
	d = f.step(calm)
	check("held", d, "purge", status.JobPaused, status.CodeHeld)
	if hs := d.Jobs["purge"].Holds; len(hs) != 1 || hs[0].ID != "h1" {
		t.Fatalf("held: holds %+v; want h1", hs)
	}
	holds["purge"] = false

	d = f.step(world{load: 0.2, used: 0.1, age: time.Minute}) // older than MaxAge
	check("stale", d, "purge", status.JobPaused, status.CodeStale)
	check("stale", d, "archive", status.JobPaused, status.CodeStale)

	for range 3 {
		d = f.step(world{load: 0.9, raw: 1.05, used: 0.1}) // at critical
	}
	check("critical", d, "purge", status.JobPaused, status.CodeCritical)
	if d.Code != status.CodeCritical || d.Mode != status.ModeCritical {
		t.Fatalf("critical: decision %s/%s", d.Mode, d.Code)
	}
}

// A rule on one of the horizon, slot or wraparound signals binds like any
// other: over its target the budget is cut and the signal is named.
func TestRulesOnHorizonSlotsAndWraparoundBind(t *testing.T) {
	for _, tc := range []struct {
		name  signals.Name
		rule  Rule
		value float64
	}{
		{signals.XminHorizonAgeSeconds, Rule{Target: 1800}, 3600},
		{signals.XminHorizonAgeXIDs, Rule{Target: 1e6}, 2e6},
		{signals.SlotRetainedBytesMax, Rule{Target: 10e9}, 20e9},
		{signals.WraparoundFraction, Rule{Target: 0.7, Critical: 1}, 0.95},
	} {
		f := setup(t, Config{Rules: map[signals.Name]Rule{tc.name: tc.rule}})
		calm := world{load: 0.2, used: 0.1}
		f.steps(3, calm)
		w := snap(at(f.tick+1), calm)
		w.Samples = append(w.Samples, signals.Sample{Name: tc.name, Value: tc.value, Raw: tc.value, At: at(f.tick + 1)})
		f.tick++
		d := f.c.Step(at(f.tick), w)
		if d.Code != status.CodeCut || !d.Binding.Equal(status.Binding{Signal: tc.name}) {
			t.Errorf("%s at %v (target %v): decision %s binding %q; want cut, binding it", tc.name, tc.value, tc.rule.Target, d.Code, d.Binding)
		}
	}
}
