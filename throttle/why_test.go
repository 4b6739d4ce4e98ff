package throttle

import (
	"maps"
	"slices"
	"testing"
	"time"

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

// Each observation counts the time since the job's last one against the
// why observed then; a stalled loop counts for at most the cap; the open
// interval counts too, and the totals never go down.
func TestLimitedTimeCountsIntervalsCapped(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lt := NewLimitedTime(3 * time.Second)
	if got := lt.Seconds(t0, "purge"); got != nil {
		t.Fatalf("a job never observed: %v; want nil", got)
	}
	obs := []struct {
		at  time.Duration
		why status.Why
	}{
		{0, status.WhyFullRate},
		{2 * time.Second, "foreground_latency"},
		{3 * time.Second, status.WhySlowStart},
		{60 * time.Second, status.WhyGrowth}, // a stall: slow_start counts 3 s, not 57
		{59 * time.Second, status.WhyStale},  // out of order: counts nothing, moves no clock back
	}
	var prev map[status.Why]float64
	for _, o := range obs {
		lt.Observe(t0.Add(o.at), "purge", o.why)
		got := lt.Seconds(t0.Add(o.at), "purge")
		for w, s := range prev {
			if got[w] < s {
				t.Fatalf("at %s: %s went down from %v to %v", o.at, w, s, got[w])
			}
		}
		prev = got
	}
	lt.Observe(t0.Add(61*time.Second), "other_job", status.WhyGated)
	got := lt.Seconds(t0.Add(61*time.Second), "purge")
	want := map[status.Why]float64{status.WhyFullRate: 2, "foreground_latency": 1, status.WhySlowStart: 3, status.WhyStale: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("seconds %v; want %v", got, want)
	}
	// The open interval is capped too, and counted for the why observed.
	if got := lt.Seconds(t0.Add(10*time.Minute), "purge")[status.WhyStale]; got != 3 {
		t.Fatalf("open interval: stale %v s; want 3", got)
	}
	if js := lt.Jobs(); !slices.Equal(js, []status.Job{"other_job", "purge"}) {
		t.Fatalf("jobs %v", js)
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
