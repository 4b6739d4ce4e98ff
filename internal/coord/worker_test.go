package coord

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/limit"
)

// The worker's lease in a synctest bubble: its clock is the bubble's, so
// a lease lapses at its end to the nanosecond and nothing sleeps for real.

// advance moves the bubble's clock on by d and returns once every timer
// due by then has fired and its goroutine has finished. In a bubble
// time.Sleep waits for no one: the clock jumps as soon as every goroutine
// is blocked.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// running is a leader's allocation of rate batches/s to one worker.
func running(rate float64) (limit.Allocation, status.JobStatus) {
	return limit.Allocation{Rate: rate, Burst: 1, MaxInFlight: 1},
		status.JobStatus{State: status.JobRunning, Code: status.CodeRunning, Reason: "running"}
}

// open reports whether w's limiter lets work start, without taking a
// token.
func open(w *worker) bool {
	ok, _ := w.l.State()
	return ok
}

// A lease applies until it ends, and not a moment after: the worker
// pauses then, unavailable, with no heartbeat to tell it.
func TestLeaseLapsesAtItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/lapse", jobs.Config{Name: "lapse"})
		if open(w) || !w.Unavailable() {
			t.Fatalf("a new worker is %+v; want it paused, unavailable, until its first lease", w.Status())
		}
		a, st := running(10)
		w.lease(a, 3*time.Second, st)
		if st := w.Status(); !open(w) || st.State != status.JobRunning || st.Rate != 10 || w.Unavailable() {
			t.Fatalf("leased: %+v, open %v; want running at 10/s", st, open(w))
		}
		advance(3*time.Second - time.Nanosecond)
		if !open(w) || w.Unavailable() {
			t.Fatalf("a nanosecond before its lease ends the worker is %+v", w.Status())
		}
		advance(time.Nanosecond)
		st = w.Status()
		if open(w) || !w.Unavailable() || st.State != status.JobPaused || st.Code != status.CodeUnavailable {
			t.Fatalf("at the end of its lease the worker is %+v, open %v; want paused, unavailable", st, open(w))
		}
		if want := "allocation lease expired: no leader renewed it"; st.Reason != want {
			t.Errorf("lapsed for %q; want %q", st.Reason, want)
		}
		if _, ok := w.Allow(); ok {
			t.Error("a lapsed worker allowed a batch")
		}
	})
}

// A renewal replaces the lease: the worker runs to the end of the new one,
// and the old one's end passes unnoticed.
func TestRenewedLeaseRunsFromTheRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/renew", jobs.Config{Name: "renew"})
		a, st := running(10)
		w.lease(a, 3*time.Second, st)
		advance(2 * time.Second)
		w.lease(a, 3*time.Second, st)
		advance(2 * time.Second) // 1 s past the first lease's end
		if !open(w) || w.Unavailable() {
			t.Fatalf("renewed at 2 s for 3 s, the worker is %+v at 4 s; want it running", w.Status())
		}
		advance(time.Second)
		if open(w) || !w.Unavailable() {
			t.Fatalf("at the end of the renewed lease the worker is %+v; want it lapsed", w.Status())
		}
	})
}

// A lease the leader publishes as paused (a critical pause, say) holds the
// worker for its own reason: it is not unavailable, and it lapses like any
// other lease.
func TestPausedLeaseSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/paused", jobs.Config{Name: "paused"})
		st := status.JobStatus{State: status.JobPaused, Code: status.CodeCritical, Reason: "critical: replica_lag"}
		w.lease(limit.Allocation{}, 3*time.Second, st)
		if got := w.Status(); open(w) || w.Unavailable() || got.Code != status.CodeCritical || got.Reason != st.Reason {
			t.Fatalf("under a paused lease the worker is %+v, open %v; want paused for %q, not unavailable", got, open(w), st.Reason)
		}
		if _, reason := w.l.State(); reason != st.Reason {
			t.Errorf("the limiter is closed for %q; want %q", reason, st.Reason)
		}
		advance(3 * time.Second)
		if !w.Unavailable() {
			t.Fatalf("past its end the paused lease still holds: %+v", w.Status())
		}
	})
}

// lapse pauses at once, whatever lease runs, and says why.
func TestLapseStopsARunningWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/now", jobs.Config{Name: "now"})
		a, st := running(10)
		w.lease(a, 3*time.Second, st)
		w.lapse("no allocation: cannot reach the coordination database")
		got := w.Status()
		if open(w) || !w.Unavailable() || got.Reason != "no allocation: cannot reach the coordination database" {
			t.Fatalf("after lapse the worker is %+v, open %v", got, open(w))
		}
		// The lease's own end, later, changes nothing but the reason.
		advance(3 * time.Second)
		if open(w) || !w.Unavailable() {
			t.Fatalf("the lease's end reopened a lapsed worker: %+v", w.Status())
		}
	})
}

// A removed worker stays stopped: a lease that arrives after (an
// in-flight heartbeat's) does not revive it, and the lease it had does
// not lapse it into another state later.
func TestStoppedWorkerTakesNoLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/stopped", jobs.Config{Name: "stopped"})
		a, st := running(10)
		w.lease(a, 3*time.Second, st)
		w.stop()
		before := w.Status()
		if open(w) || !w.isStopped() {
			t.Fatal("a stopped worker's limiter is open")
		}
		w.lease(a, 3*time.Second, st)
		if open(w) {
			t.Fatal("a lease after stop reopened the worker")
		}
		advance(time.Minute)
		if after := w.Status(); after.Code != before.Code || after.Reason != before.Reason {
			t.Errorf("a stopped worker's status changed from %+v to %+v; its lease's timer should be stopped", before, after)
		}
	})
}

// A new worker's first running lease lets its first batch start at once,
// however small its rate: an empty bucket would keep it waiting 1/rate
// (here 100 s). The batch after it waits for its token.
func TestFirstLeaseStartsABatchAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker("p/first", jobs.Config{Name: "first"})
		a, st := running(0.01)
		w.lease(a, 3*time.Second, st)
		done, ok := w.Allow()
		if !ok {
			t.Fatal("the first batch under a first lease at 0.01/s did not start at once")
		}
		done(1, time.Millisecond, nil)
		if _, ok := w.Allow(); ok {
			t.Error("a second batch started at once at 0.01/s")
		}
		if w.batches.Load() != 1 {
			t.Errorf("%d batches counted; want 1", w.batches.Load())
		}
		// A renewal is not a first lease: no token ahead of time again.
		w.lease(a, 3*time.Second, st)
		if _, ok := w.Allow(); ok {
			t.Error("a renewal handed out another token ahead of time")
		}
	})
}

// Throttled, a new worker's first token falls due at a random point of
// its first interval: never later than one interval, and spread, so that
// many new workers sharing a small rate do not all start their first
// batch one interval late together.
func TestFirstThrottledLeaseStartsWithinOneInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 2 * time.Second // at 0.5/s
		var first, last time.Duration
		for i := range 30 {
			w := newWorker("p/spread", jobs.Config{Name: "spread"})
			a, _ := running(0.5)
			w.lease(a, time.Hour, status.JobStatus{State: status.JobThrottled, Code: status.CodeHolding, Reason: "holding"})
			start := time.Now()
			done, err := w.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			done(1, 0, nil)
			took := time.Since(start)
			if i == 0 || took < first {
				first = took
			}
			last = max(last, took)
			w.stop()
		}
		if last > interval {
			t.Errorf("a first batch at 0.5/s, throttled, waited %s; want within one interval, %s", last, interval)
		}
		// Uniform over the interval, 30 first tokens all in one half of
		// it have a chance of one in a billion.
		if first >= interval/2 || last <= interval/2 {
			t.Errorf("30 new workers' first batches waited from %s to %s; want them spread over the interval, %s", first, last, interval)
		}
	})
}

// leaseFor: the lease outlives three of the leader's ticks, and is never
// under DefaultLease.
func TestLeaseFor(t *testing.T) {
	for _, tc := range []struct{ tick, want time.Duration }{
		{0, DefaultLease},
		{500 * time.Millisecond, DefaultLease},
		{time.Second, DefaultLease},
		{2 * time.Second, 6 * time.Second},
		{10 * time.Second, 30 * time.Second},
	} {
		if got := leaseFor(tc.tick); got != tc.want {
			t.Errorf("leaseFor(%s) = %s; want %s", tc.tick, got, tc.want)
		}
	}
}
