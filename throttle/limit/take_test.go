package limit

import (
	"testing"
	"time"
)

// TakeAt takes a token at the rate with no in-flight slot: a slot every
// batch holds is no reason to refuse it, and it leaves none held. A
// refusal (no token, a closed gate) is demand the limiter did not meet.
func TestLimiterTakeAt(t *testing.T) {
	ms := time.Millisecond
	l := New("ghost", func() time.Time { return t0 })
	step := func(at time.Time, want bool) {
		t.Helper()
		if ok := l.TakeAt(at); ok != want {
			t.Fatalf("TakeAt(t0+%s) = %v; want %v", at.Sub(t0), ok, want)
		}
	}
	step(t0, false) // no allocation
	if !l.Waited() {
		t.Error("a refused TakeAt is no wait")
	}
	l.ApplyAt(t0, Allocation{Rate: 10, Burst: 2, MaxInFlight: 1})
	step(t0, false) // the bucket starts empty
	busy, ok := l.AllowAt(t0.Add(100 * ms))
	if !ok {
		t.Fatal("AllowAt with a token and a slot refused")
	}
	step(t0.Add(200*ms), true) // the one slot is held: a token still
	step(t0.Add(200*ms), false)
	if n := l.InFlight(); n != 1 {
		t.Errorf("InFlight %d after a take; want the Allow's 1", n)
	}
	busy.Release()
	l.Waited()
	step(t0.Add(1000*ms), true) // the bucket holds Burst 2
	step(t0.Add(1000*ms), true)
	if l.Waited() {
		t.Error("takes that found tokens read as a wait")
	}
	l.Pause("deploy")
	step(t0.Add(2000*ms), false) // paused
	if !l.Waited() {
		t.Error("a TakeAt refused at a closed gate is no wait")
	}
	l.Resume()
	step(t0.Add(2000*ms), true)
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight %d; want 0", n)
	}
}

// A token taken without a slot is work the Limiter never sees end: it
// counts as the job at work when taken, as a released batch does at its
// release, so a freno client's chunks keep readings out of the job-free
// baselines.
func TestTakeCountsAsWork(t *testing.T) {
	ms := time.Millisecond
	l := New("ghost", func() time.Time { return t0 })
	if w := l.WorkedAt(t0); !w.IsZero() {
		t.Fatalf("WorkedAt %v before any work; want zero", w)
	}
	l.ApplyAt(t0, Allocation{Rate: 10, Burst: 1, MaxInFlight: 1})
	if !l.TakeAt(t0.Add(500 * ms)) {
		t.Fatal("TakeAt with a token refused")
	}
	if w := l.WorkedAt(t0.Add(2000 * ms)); !w.Equal(t0.Add(500 * ms)) {
		t.Fatalf("WorkedAt %v after a take at t0+500ms; want the take's time", w.Sub(t0))
	}
	if l.TakeAt(t0.Add(500 * ms)) {
		t.Fatal("a second take with no token left")
	}
	if w := l.WorkedAt(t0.Add(2000 * ms)); !w.Equal(t0.Add(500 * ms)) {
		t.Fatalf("a refused take moved WorkedAt to %v", w.Sub(t0))
	}
}
