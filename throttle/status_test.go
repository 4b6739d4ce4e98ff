package throttle

import (
	"testing"
	"time"
)

// Every decision carries a reason code for each job, produced where the
// reason's text is, so nothing downstream has to parse the text.
func TestDecisionsCarryReasonCodes(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive", MaxRate: 2})
	calm := world{load: 0.2, used: 0.1}
	check := func(what string, d Decision, job Job, state JobState, code Code) {
		t.Helper()
		jd := d.Jobs[job]
		if jd.State != state || jd.Code != code {
			t.Fatalf("%s: %s is %s/%s (%q); want %s/%s", what, job, jd.State, jd.Code, jd.Reason, state, code)
		}
	}

	d := f.steps(3, calm)
	check("calm", d, "purge", JobRunning, CodeRunning)
	check("calm", d, "archive", JobRunning, CodeMaxRate)

	d = f.step(world{load: 1.0, raw: 0.95, used: 0.1}) // over the 0.7 target
	check("over target", d, "purge", JobThrottled, CodeCut)
	if d.Code != CodeCut || d.Mode != ModeThrottled {
		t.Fatalf("over target: decision %s/%s; want throttled/cut", d.Mode, d.Code)
	}

	holds["purge"] = true
	d = f.step(calm)
	check("held", d, "purge", JobPaused, CodeHeld)
	if hs := d.Jobs["purge"].Holds; len(hs) != 1 || hs[0].ID != "h1" {
		t.Fatalf("held: holds %+v; want h1", hs)
	}
	holds["purge"] = false

	d = f.step(world{load: 0.2, used: 0.1, age: time.Minute}) // older than MaxAge
	check("stale", d, "purge", JobPaused, CodeStale)
	check("stale", d, "archive", JobPaused, CodeStale)

	for range 3 {
		d = f.step(world{load: 0.9, raw: 1.05, used: 0.1}) // at critical
	}
	check("critical", d, "purge", JobPaused, CodeCritical)
	if d.Code != CodeCritical || d.Mode != ModeCritical {
		t.Fatalf("critical: decision %s/%s", d.Mode, d.Code)
	}
}

func TestCodeOfAStateAlone(t *testing.T) {
	for s, want := range map[JobState]Code{JobRunning: CodeRunning, JobThrottled: CodeHolding, JobPaused: CodeUnavailable, "": CodeUnavailable} {
		if got := CodeOf(s); got != want || (s == JobPaused && got.Go()) {
			t.Errorf("CodeOf(%q) = %s; want %s", s, got, want)
		}
	}
}
