package pacing

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// TestDecisionsDriveLimiters runs the controller, real holds and the
// limiters together on the fake clock: a worker paced by its limiter
// works, stops the moment a hold is taken (even mid-wait), and resumes
// slowly after it is released.
func TestDecisionsDriveLimiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		holds, err := hold.NewLocal(hold.LocalConfig{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := throttle.New(throttle.Config{MaxBudget: 20, InitialBudget: 10, Holds: holds})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Register(throttle.JobConfig{Name: "purge"}); err != nil {
			t.Fatal(err)
		}
		ls := NewLimiters(nil)
		healthy := func() signals.Snapshot {
			now := time.Now()
			return signals.Snapshot{At: now, MaxAge: 3 * time.Second, Samples: []signals.Sample{
				{Name: signals.PrimaryLoad, Value: 0.3, Raw: 0.3, At: now},
				{Name: signals.ConnectionUsedFraction, Value: 0.2, Raw: 0.2, At: now},
			}}
		}
		var batches atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				release, err := ls.Get("purge").Wait(ctx)
				if err != nil {
					return
				}
				batches.Add(1)
				c.Report("purge", throttle.Feedback{Rows: 10, Duration: 10 * time.Millisecond})
				release.Release()
			}
		})
		var last throttle.Decision
		tick := func(n int) int64 {
			before := batches.Load()
			for range n {
				last = c.Step(time.Now(), healthy())
				ls.Apply(last)
				time.Sleep(time.Second)
			}
			synctest.Wait()
			return batches.Load() - before
		}
		if n := tick(10); n < 80 {
			t.Fatalf("%d batches in 10 s at a budget of at least 10/s", n)
		}
		budgetBefore := last.Budget
		h, err := holds.Add(hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual, Reason: "incident", Actor: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if n := tick(10); n > 1 {
			t.Fatalf("%d batches in 10 s while every job was held", n)
		}
		if open, reason := ls.Get("purge").State(); open || !strings.Contains(reason, "incident") {
			t.Fatalf("held limiter open=%v reason %q", open, reason)
		}
		if last.Mode != status.ModePaused || last.Budget != 0 {
			t.Fatalf("while held: %s, budget %v", last.Mode, last.Budget)
		}
		if _, err := holds.Release(h.ID); err != nil {
			t.Fatal(err)
		}
		d := c.Step(time.Now(), healthy())
		ls.Apply(d)
		if d.Budget == 0 || d.Budget > 0.25*budgetBefore+1e-9 {
			t.Fatalf("after release the budget is %v (before the hold %v); want a slow start", d.Budget, budgetBefore)
		}
		if n := tick(10); n == 0 {
			t.Fatal("no work after the hold was released")
		}
		cancel()
		wg.Wait()
	})
}

// A job's pacer reports the last decision's foreground stretch and its
// time, and nothing before the first decision, for a decision without
// the job, or for one that does not measure the foreground.
func TestLimiterPacerReportsTheForegroundStretch(t *testing.T) {
	c, err := throttle.New(throttle.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	ls := NewLimiters(func() time.Time { return t0 })
	p := ls.Pacer(c, "purge")
	if v, _, ok := p.ForegroundStretch(); ok {
		t.Fatalf("before any decision: %v, true; want false", v)
	}
	running := map[status.Job]throttle.JobDecision{"purge": {State: status.JobRunning, Code: status.CodeRunning}}
	for _, tc := range []struct {
		d      throttle.Decision
		want   float64
		wantOK bool
	}{
		{throttle.Decision{At: t0, Jobs: running, Foreground: 1.5, ForegroundAt: t0.Add(-time.Second)}, 1.5, true},
		{throttle.Decision{At: t0, Jobs: running}, 0, false},                     // no foreground_latency rule
		{throttle.Decision{At: t0, Foreground: 0.5, ForegroundAt: t0}, 0, false}, // the job is not in it
	} {
		ls.Apply(tc.d)
		got, at, ok := p.ForegroundStretch()
		if ok != tc.wantOK || got != tc.want || ok && !at.Equal(tc.d.ForegroundAt) {
			t.Errorf("after %+v: %v at %v, %v; want %v at %v, %v", tc.d, got, at, ok, tc.want, tc.d.ForegroundAt, tc.wantOK)
		}
	}
}
