package throttle

import (
	"slices"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// A real decision's jobs get the why of their code and the decision's
// binding signal: cut by primary_load, held by a person's hold.
func TestWhyOfDecision(t *testing.T) {
	why := func(d Decision, j status.Job) status.Why {
		st, ok := d.Status(j)
		if !ok {
			t.Fatalf("the decision has no job %s", j)
		}
		return status.WhyOf(st)
	}
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive", MaxRate: 2})
	calm := world{load: 0.2, used: 0.1}
	d := f.steps(3, calm)
	for j, jd := range d.Jobs {
		if w := why(d, j); w == status.WhyOther || !slices.Contains(status.Whys(), w) {
			t.Fatalf("calm: %s has why %q (code %s)", j, w, jd.Code)
		}
	}
	d = f.step(world{load: 1.0, raw: 0.95, used: 0.1}) // over the 0.7 target
	if jd := d.Jobs["purge"]; jd.Code != status.CodeCut || why(d, "purge") != "primary_load" {
		t.Fatalf("over target: purge %s, binding %q: why %q; want primary_load", jd.Code, d.Binding, why(d, "purge"))
	}
	holds["purge"] = true
	d = f.step(calm)
	if w := why(d, "purge"); w != "hold:manual" {
		t.Fatalf("held: why %q; want hold:manual", w)
	}
}

// The controller refuses an external signal named as one of the why set's
// words, or as a built-in signal: it would read as that word.
func TestExternalSignalNamedAsAWhyIsRefused(t *testing.T) {
	for _, n := range []signals.Name{"stale", "other", "growth", "primary_load"} {
		if _, err := New(Config{External: []signals.Name{n}}); err == nil {
			t.Errorf("New accepted External %q", n)
		}
	}
	ext := []signals.Name{"api_p99", "app_errors"}
	if _, err := New(Config{External: ext}); err != nil {
		t.Errorf("New refused External %v: %v", ext, err)
	}
}
