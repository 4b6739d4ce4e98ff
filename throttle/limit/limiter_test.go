package limit

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type grant struct {
	g   Grant
	err error
	at  time.Time
}

func (g grant) release() { g.g.Release() }

// waitLimiter runs l.Wait(ctx) in a goroutine; the channel gets the result.
func waitLimiter(ctx context.Context, l *Limiter) <-chan grant {
	done := make(chan grant, 1)
	go func() {
		release, err := l.Wait(ctx)
		done <- grant{release, err, time.Now()}
	}()
	return done
}

// mustGrant fails the test unless done already holds a successful grant.
func mustGrant(t *testing.T, done <-chan grant, what string) grant {
	t.Helper()
	g, ok := returned(done)
	if !ok {
		t.Fatalf("%s: Wait still blocked", what)
	}
	if g.err != nil || g.g == (Grant{}) {
		t.Fatalf("%s: Wait = %v, zero Grant %v", what, g.err, g.g == (Grant{}))
	}
	return g
}

// mustBlock fails the test if done holds a result.
func mustBlock(t *testing.T, done <-chan grant, what string) {
	t.Helper()
	if g, ok := returned(done); ok {
		t.Fatalf("%s: Wait returned (err %v); want it blocked", what, g.err)
	}
}

func TestLimiterNewFailsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		if open, reason := l.State(); open || reason != ReasonNoAllocation {
			t.Fatalf("new Limiter State() = %v, %q; want closed, %q", open, reason, ReasonNoAllocation)
		}
		if a := l.Allocation(); a != (Allocation{}) {
			t.Fatalf("new Limiter Allocation() = %+v", a)
		}
		if _, ok := l.Allow(); ok {
			t.Fatal("new Limiter allowed work")
		}
		done := waitLimiter(t.Context(), l)
		advance(time.Hour)
		mustBlock(t, done, "no allocation for an hour")

		applied := time.Now()
		l.Apply(Allocation{Rate: 10, Burst: 1, MaxInFlight: 1})
		synctest.Wait()
		mustBlock(t, done, "bucket starts empty")
		advance(100 * time.Millisecond)
		g := mustGrant(t, done, "100ms after Apply(10/s)")
		if d := g.at.Sub(applied); d != 100*time.Millisecond {
			t.Errorf("first token %s after Apply; want 1/Rate = 100ms", d)
		}
		g.release()
	})
}

// countGrants runs workers that Wait and release at once until ctx ends,
// and returns how many batches they started.
func countGrants(ctx context.Context, l *Limiter, workers int) int {
	counts := make(chan int, workers)
	for range workers {
		go func() {
			n := 0
			for {
				release, err := l.Wait(ctx)
				if err != nil {
					counts <- n
					return
				}
				n++
				release.Release()
			}
		}()
	}
	total := 0
	for range workers {
		total += <-counts
	}
	return total
}

func TestLimiterRate(t *testing.T) {
	for _, workers := range []int{1, 4} {
		synctest.Test(t, func(t *testing.T) {
			l := New("purge", nil)
			l.Apply(Allocation{Rate: 10, Burst: 1, MaxInFlight: workers})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if n := countGrants(ctx, l, workers); n < 99 || n > 101 {
				t.Errorf("%d workers: %d grants in 10s at 10/s; want 100±1", workers, n)
			}
		})
	}
}

func TestLimiterRateChangesKeepPace(t *testing.T) {
	// Each Apply wakes every sleeping waiter to re-reserve. With several
	// reservations outstanding, rate.Limiter cannot give them all back and
	// the bucket would sink into debt; the job must still get ∫rate dt.
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 10, Burst: 1, MaxInFlight: 8})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		go func() {
			for i := 1; i < 10; i++ {
				advance(time.Second)
				l.Apply(Allocation{Rate: float64(10 + 10*(i%2)), Burst: 1, MaxInFlight: 8}) // 20, 10, 20, …
			}
		}()
		// 5 s at 10/s and 5 s at 20/s.
		if n := countGrants(ctx, l, 8); n < 149 || n > 151 {
			t.Errorf("%d grants; want 150±1", n)
		}
	})
}

func TestLimiterPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 100, Burst: 5, MaxInFlight: 5})
		advance(time.Second) // fill the bucket
		l.Pause("deploy")
		if open, reason := l.State(); open || reason != "deploy" {
			t.Fatalf("State() = %v, %q; want closed, deploy", open, reason)
		}
		if _, ok := l.Allow(); ok {
			t.Fatal("Allow while paused")
		}
		done := waitLimiter(t.Context(), l)
		advance(time.Hour)
		mustBlock(t, done, "paused")
		l.Apply(Allocation{Rate: 200, Burst: 5, MaxInFlight: 5}) // a new allocation does not lift a pause
		synctest.Wait()
		mustBlock(t, done, "paused, new allocation")
		resumed := time.Now()
		l.Resume()
		synctest.Wait()
		g := mustGrant(t, done, "after Resume")
		if g.at != resumed {
			t.Errorf("granted %s after Resume; want at once", g.at.Sub(resumed))
		}
		g.release()

		// Resume without a positive allocation keeps the gate closed.
		l.Pause("")
		if _, reason := l.State(); reason != "paused" {
			t.Errorf("empty pause reason reads %q; want paused", reason)
		}
		l.Apply(Allocation{})
		l.Resume()
		if open, reason := l.State(); open || reason != ReasonNoAllocation {
			t.Errorf("State() after Resume with no allocation = %v, %q", open, reason)
		}
	})
}

func TestLimiterZeroRateDoesNotStrand(t *testing.T) {
	// rate.Limiter's pitfall: after SetLimit(0), a waiter without a
	// deadline never wakes, even when the limit is raised.
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 1, Burst: 1, MaxInFlight: 1})
		done := waitLimiter(context.Background(), l) // no deadline
		advance(500 * time.Millisecond)              // asleep for its token, due at 1s
		l.Apply(Allocation{Rate: 0, Burst: 1, MaxInFlight: 1})
		if open, reason := l.State(); open || reason != ReasonNoAllocation {
			t.Fatalf("State() after Rate 0 = %v, %q", open, reason)
		}
		advance(100 * time.Second)
		mustBlock(t, done, "rate 0")
		raised := time.Now()
		l.Apply(Allocation{Rate: 5, Burst: 1, MaxInFlight: 1})
		synctest.Wait()
		advance(200 * time.Millisecond) // at most one token interval at 5/s
		g := mustGrant(t, done, "rate raised to 5/s")
		// The bucket kept filling at the last positive rate while the gate
		// was closed, so the token is there at once.
		if d := g.at.Sub(raised); d != 0 {
			t.Errorf("granted %s after the rate was raised; want at once, from the bucket filled meanwhile", d)
		}
		g.release()
	})
}

func TestLimiterRateRaisedWakesSleeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 0.01, Burst: 1, MaxInFlight: 1}) // first token due in 100s
		done := waitLimiter(t.Context(), l)
		advance(time.Second)
		mustBlock(t, done, "0.01/s")
		raised := time.Now()
		l.Apply(Allocation{Rate: 100, Burst: 1, MaxInFlight: 1})
		advance(10 * time.Millisecond) // 0.99 of a token at 100/s
		g := mustGrant(t, done, "rate raised to 100/s")
		// The bucket held 0.01 of a token: the rest comes at the new rate,
		// in 9.9 ms, neither at once nor at the old rate.
		if d := g.at.Sub(raised); d < 9*time.Millisecond || d > 10*time.Millisecond {
			t.Errorf("granted %s after the rate was raised to 100/s; want 9.9ms", d)
		}
		g.release()
	})
}

func TestLimiterPauseDuringTokenWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 0.1, Burst: 1, MaxInFlight: 1}) // token due at 10s
		done := waitLimiter(t.Context(), l)
		advance(time.Second)
		l.Pause("deploy")
		advance(29 * time.Second) // well past the token's due time
		mustBlock(t, done, "paused while sleeping for a token")
		resumed := time.Now()
		l.Resume()
		synctest.Wait()
		g := mustGrant(t, done, "after Resume")
		if g.at != resumed {
			t.Errorf("granted %s after Resume; want at once (the bucket refilled during the pause)", g.at.Sub(resumed))
		}
		g.release()
	})
}

func TestLimiterPauseAsTokenFallsDue(t *testing.T) {
	// The gate is checked again after the token wait: a pause that lands
	// as the token falls due still stops the work. The limiter's clock
	// jumps past the due time so that the waiter, woken by Pause, finds
	// its token due.
	synctest.Test(t, func(t *testing.T) {
		var skew atomic.Int64
		l := New("purge", func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
		l.Apply(Allocation{Rate: 0.1, Burst: 1, MaxInFlight: 1}) // token due at 10s
		done := waitLimiter(t.Context(), l)
		advance(time.Second)
		skew.Store(int64(10 * time.Second))
		l.Pause("deploy")
		advance(time.Minute)
		mustBlock(t, done, "paused as the token fell due")
		if n := l.InFlight(); n != 0 {
			t.Errorf("InFlight %d while the only waiter is paused", n)
		}
		l.Resume()
		synctest.Wait()
		mustGrant(t, done, "after Resume").release()
	})
}

func TestLimiterPauseGivesTokenBack(t *testing.T) {
	// A waiter stopped by a pause has spent no token: resumed before its
	// token was due, it gets it when it was due, not one interval later.
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		start := time.Now()
		l.Apply(Allocation{Rate: 0.1, Burst: 1, MaxInFlight: 1}) // token due at 10s
		done := waitLimiter(t.Context(), l)
		advance(time.Second)
		l.Pause("deploy")
		advance(4 * time.Second)
		l.Resume()
		synctest.Wait()
		mustBlock(t, done, "resumed at 5s")
		advance(5 * time.Second)
		g := mustGrant(t, done, "at 10s")
		if d := g.at.Sub(start); d != 10*time.Second {
			t.Errorf("granted at %s; want 10s, when the token was due", d)
		}
		g.release()
	})
}

func TestLimiterMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 2})
		a := waitLimiter(t.Context(), l)
		b := waitLimiter(t.Context(), l)
		c := waitLimiter(t.Context(), l)
		advance(time.Minute)
		var granted []grant
		var blocked <-chan grant
		for _, done := range []<-chan grant{a, b, c} {
			if g, ok := returned(done); ok {
				if g.err != nil {
					t.Fatal(g.err)
				}
				granted = append(granted, g)
			} else {
				blocked = done
			}
		}
		if len(granted) != 2 || l.InFlight() != 2 {
			t.Fatalf("%d granted, InFlight %d; want 2, 2", len(granted), l.InFlight())
		}
		if _, ok := l.Allow(); ok {
			t.Fatal("Allow with 2 of 2 in flight")
		}
		granted[0].release()
		synctest.Wait()
		mustGrant(t, blocked, "after a release").release()
		granted[1].release()
		if n := l.InFlight(); n != 0 {
			t.Errorf("InFlight %d after every release", n)
		}

		// Raising MaxInFlight admits a waiter at once.
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 1})
		r1, ok := l.Allow()
		if !ok {
			t.Fatal("Allow with 0 of 1 in flight")
		}
		d := waitLimiter(t.Context(), l)
		synctest.Wait()
		mustBlock(t, d, "1 of 1 in flight")
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 2})
		synctest.Wait()
		mustGrant(t, d, "MaxInFlight raised").release()
		r1.Release()
	})
}

func TestLimiterReleaseIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 1})
		release, err := l.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		release.Release()
		release.Release()
		if n := l.InFlight(); n != 0 {
			t.Fatalf("InFlight %d after a double release; want 0", n)
		}
		if _, ok := l.Allow(); !ok {
			t.Fatal("Allow with 0 of 1 in flight")
		}
		// A second release of the first batch must not free this one's slot.
		release.Release()
		if _, ok := l.Allow(); ok {
			t.Error("Allow with 1 of 1 in flight, after a stale release")
		}
	})
}

func TestLimiterWaitNeverOutlivesCtx(t *testing.T) {
	full := Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 1}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, l *Limiter)
		want  string // in the error
	}{
		{"no allocation", func(t *testing.T, l *Limiter) {}, "gate closed (no allocation)"},
		{"paused", func(t *testing.T, l *Limiter) {
			l.Apply(full)
			l.Pause("deploy")
		}, "gate closed (deploy)"},
		{"slot", func(t *testing.T, l *Limiter) {
			l.Apply(full)
			if _, ok := l.Allow(); !ok {
				t.Fatal("Allow refused")
			}
		}, "in-flight slot (1 of 1 running)"},
		{"token", func(t *testing.T, l *Limiter) {
			l.Apply(Allocation{Rate: 0.001, Burst: 1, MaxInFlight: 2})
		}, "token at 0.001/s"},
		{"turn", func(t *testing.T, l *Limiter) {
			l.Apply(Allocation{Rate: 0.001, Burst: 1, MaxInFlight: 2})
			waitLimiter(t.Context(), l) // holds the turn for 1000s
			synctest.Wait()
		}, "queued behind another waiter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := New("purge", nil)
				tc.setup(t, l)
				inFlight := l.InFlight()

				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				defer cancel()
				start := time.Now()
				release, err := l.Wait(ctx)
				if d := time.Since(start); d != 3*time.Second {
					t.Errorf("Wait returned after %s; want exactly the 3s deadline", d)
				}
				if release != (Grant{}) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Wait = zero Grant %v, %v; want the zero Grant, DeadlineExceeded", release == (Grant{}), err)
				}
				if !strings.Contains(err.Error(), `job "purge"`) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q; want the job and %q", err, tc.want)
				}
				if n := l.InFlight(); n != inFlight {
					t.Errorf("InFlight %d after a failed Wait; want %d", n, inFlight)
				}

				// Cancel, rather than a deadline, ends the wait at once.
				ctx, cancel = context.WithCancel(t.Context())
				done := waitLimiter(ctx, l)
				advance(time.Second)
				cancel()
				synctest.Wait()
				g, ok := returned(done)
				if !ok || !errors.Is(g.err, context.Canceled) {
					t.Fatalf("after cancel: returned %v, err %v; want context.Canceled", ok, g.err)
				}
			})
		})
	}
}

func TestLimiterWaitCanceledCtxTakesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 1, Burst: 1, MaxInFlight: 1})
		advance(time.Second) // one token in the bucket
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if release, err := l.Wait(ctx); release != (Grant{}) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with a canceled ctx = %v; want context.Canceled", err)
		}
		if _, ok := l.Allow(); !ok {
			t.Error("a canceled Wait took the token or the slot")
		}
	})
}

func TestLimiterAllowAt(t *testing.T) {
	ms := time.Millisecond
	l := New("purge", func() time.Time { return t0 })
	step := func(at time.Time, want bool) Grant {
		t.Helper()
		release, ok := l.AllowAt(at)
		if ok != want {
			t.Fatalf("AllowAt(t0+%s) = %v; want %v", at.Sub(t0), ok, want)
		}
		return release
	}
	step(t0, false) // no allocation
	l.ApplyAt(t0, Allocation{Rate: 10, Burst: 2, MaxInFlight: 3})
	step(t0, false)                   // the bucket starts empty
	r1 := step(t0.Add(100*ms), true)  // one token
	step(t0.Add(100*ms), false)       // spent
	r2 := step(t0.Add(1000*ms), true) // the bucket holds Burst 2
	r3 := step(t0.Add(1000*ms), true) //
	step(t0.Add(2000*ms), false)      // 3 of 3 in flight
	r1.Release()                      //
	l.Pause("deploy")                 //
	step(t0.Add(2000*ms), false)      // paused
	l.Resume()                        //
	r4 := step(t0.Add(2000*ms), true) //
	l.ApplyAt(t0.Add(2000*ms), Allocation{Rate: 10, Burst: 0, MaxInFlight: 3})
	if b := l.Allocation().Burst; b != 1 {
		t.Errorf("Burst 0 with a positive rate reads %d; want 1", b)
	}
	r2.Release()
	r3.Release()
	r4.Release()
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight %d; want 0", n)
	}
}

func TestAllocationNormalized(t *testing.T) {
	for _, tc := range []struct{ in, want Allocation }{
		{Allocation{}, Allocation{}},
		{Allocation{Rate: 5, Burst: 0, MaxInFlight: 1}, Allocation{Rate: 5, Burst: 1, MaxInFlight: 1}},
		{Allocation{Rate: -1, Burst: -3, MaxInFlight: -2}, Allocation{}},
		{Allocation{Rate: math.NaN(), Burst: 2, MaxInFlight: 1}, Allocation{Rate: 0, Burst: 2, MaxInFlight: 1}},
	} {
		if got := tc.in.normalized(); got != tc.want {
			t.Errorf("%+v.normalized() = %+v; want %+v", tc.in, got, tc.want)
		}
	}
}

func TestLimiterStaleReleaseOfAReusedGrant(t *testing.T) {
	// A released grant's state is reused by the next grant; the first
	// grant's release, called again, must not free the second's slot,
	// whichever of Wait's paths granted it.
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 1})
		first, err := l.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		first.Release()
		second, err := l.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		first.Release()
		if n := l.InFlight(); n != 1 {
			t.Fatalf("InFlight %d after a stale release; want 1", n)
		}
		// A waiter queued for the slot gets it from the second release
		// only.
		done := waitLimiter(t.Context(), l)
		synctest.Wait()
		first.Release()
		synctest.Wait()
		mustBlock(t, done, "after a stale release")
		second.Release()
		synctest.Wait()
		mustGrant(t, done, "after the second release").release()
	})
}

func TestLimiterWaitDoesNotPassAQueuedWaiter(t *testing.T) {
	// A waiter asleep on its reservation is first in line: a later Wait
	// finds no token now and queues behind it, even once the bucket
	// refills past the sleeper's due time.
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: 1, Burst: 2, MaxInFlight: 4}) // first token due at 1s
		first := waitLimiter(t.Context(), l)
		synctest.Wait()
		second := waitLimiter(t.Context(), l)
		synctest.Wait()
		advance(time.Second)
		mustGrant(t, first, "at 1s").release()
		mustBlock(t, second, "at 1s")
		advance(time.Second)
		mustGrant(t, second, "at 2s").release()
	})
}

// A grant's done function releases the slot and reports once, however
// often it is called.
func TestGrantDoneReleasesAndReportsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		l.Apply(Allocation{Rate: math.Inf(1), Burst: 1, MaxInFlight: 1})
		g, err := l.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		reports := 0
		done := g.Done(func(rows int64, took time.Duration, err error) {
			reports++
			if rows != 7 || took != time.Second || err != nil {
				t.Errorf("report %d, %s, %v; want 7, 1s, nil", rows, took, err)
			}
			if n := l.InFlight(); n != 0 {
				t.Errorf("InFlight %d when the report runs; want the slot released first", n)
			}
		})
		done(7, time.Second, nil)
		done(8, time.Minute, errors.New("again"))
		if reports != 1 || l.InFlight() != 0 {
			t.Fatalf("%d reports, %d in flight; want 1 and 0", reports, l.InFlight())
		}
	})
}

// Waited reports demand the limiter did not meet since the last call: a
// caller that waits (at the gate or for a token) or a refused Allow, not a
// caller served at once.
func TestLimiterWaitedReportsUnmetDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("purge", nil)
		if l.Waited() {
			t.Fatal("a new limiter reports a wait")
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { _, err := l.Wait(ctx); done <- err }()
		synctest.Wait() // blocked at the closed gate
		if !l.Waited() || !l.Waited() {
			t.Fatal("a caller blocked at the gate is not reported, or not while it still waits")
		}
		cancel()
		<-done
		if l.Waited() {
			t.Fatal("reported again after the waiter left and the interval was read")
		}
		l.ApplyAt(time.Now().Add(-time.Second), Allocation{Rate: 1, Burst: 1, MaxInFlight: 5})
		g, err := l.Wait(t.Context()) // a token is in the bucket: served at once
		if err != nil {
			t.Fatal(err)
		}
		g.Release()
		if l.Waited() {
			t.Fatal("a caller served at once counts as a wait")
		}
		if _, ok := l.Allow(); ok {
			t.Fatal("the bucket should be empty")
		}
		if !l.Waited() {
			t.Fatal("a refused Allow is not reported")
		}
	})
}

// t0 is the tests' fixed start on the explicit-time methods.
var t0 = time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC)
