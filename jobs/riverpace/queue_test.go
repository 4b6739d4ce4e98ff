package riverpace_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/jobs/riverpace"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// A long hold pauses the River queue (River stops fetching it, in every
// client); a short one is left to the middleware's snoozes; the end of the
// hold resumes the queue, even from a guard that did not pause it; and an
// operator's own pause of the queue is never lifted.
func TestLongHoldsPauseTheRiverQueue(t *testing.T) {
	ctx := context.Background()
	pool, tc, pacer := riverSetup(t, 50, "river_guarded")
	const queue, control = "guarded", "control"
	mw, err := riverpace.New(riverpace.Config{
		PacerFor: func(job *rivertype.JobRow) jobs.Pacer {
			if job.Queue == control {
				return nil
			}
			return pacer
		},
		MaxWait: 500 * time.Millisecond,
		Snooze:  time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var worked atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &EmailWorker{worked: &worked})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: 10}, control: {MaxWorkers: 2}},
		Workers:           workers,
		Middleware:        []rivertype.Middleware{mw},
		FetchPollInterval: 100 * time.Millisecond,
		FetchCooldown:     50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rc.Stop(context.WithoutCancel(ctx))
	// Other tests of the package count the email jobs: leave none behind.
	defer func() {
		pool.Exec(context.Background(), "DELETE FROM river_job WHERE queue = ANY($1)", []string{queue, control})
		pool.Exec(context.Background(), "DELETE FROM river_queue WHERE name = ANY($1)", []string{queue, control})
	}()
	newGuard := func(threshold time.Duration) *riverpace.QueueGuard {
		g, err := riverpace.NewQueueGuard(riverpace.QueueGuardConfig{Client: rc, Queue: queue, Pacer: pacer,
			Threshold: threshold, Interval: 100 * time.Millisecond, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	paused := func() bool {
		q, err := rc.QueueGet(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		return q.PausedAt != nil
	}
	// River creates the queue's row when the client starts working it.
	pgtest.Eventually(t, 10*time.Second, func() error {
		_, err := rc.QueueGet(ctx, queue)
		return err
	})
	held := func(want bool) {
		t.Helper()
		pgtest.Eventually(t, 5*time.Second, func() error {
			if st := pacer.Status(); (st.Code == status.CodeHeld) != want {
				return fmt.Errorf("pacer %s (%s), want held %v", st.Code, st.Reason, want)
			}
			return nil
		})
	}
	place := func(ttl time.Duration) hold.Hold {
		t.Helper()
		h, err := tc.LocalHolds().Add(hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual,
			Reason: "maintenance", Actor: "alice", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		held(true)
		return h
	}
	release := func(h hold.Hold) {
		t.Helper()
		if _, err := tc.LocalHolds().Release(h.ID); err != nil {
			t.Fatal(err)
		}
		held(false)
	}

	// A short hold (under the threshold): the queue keeps running, and
	// the middleware snoozes its jobs.
	g := newGuard(time.Hour)
	h := place(30 * time.Minute)
	if err := g.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if paused() {
		t.Fatal("a 30m hold paused the queue; the threshold is 1h")
	}
	release(h)

	// A long hold pauses the queue: River fetches none of its jobs.
	// River's producer learns of a pause from a notification, after the
	// queue's row says paused; until it does, the middleware snoozes what
	// it fetches. So the jobs go in once the producer has paused (its
	// queue_paused event).
	events, unsubscribe := rc.Subscribe(river.EventKindQueuePaused)
	defer unsubscribe()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newGuard(time.Minute).Run(runCtx) }()
	guardStopped := false
	defer func() {
		// A failure before the guard's own stop below: it must not log
		// once the test has ended.
		if !guardStopped {
			stop()
			<-done
		}
	}()
	h = place(2 * time.Hour)
	pgtest.Eventually(t, 5*time.Second, func() error {
		if !paused() {
			return errors.New("the queue is not paused under a 2h hold")
		}
		return nil
	})
	producerPaused := time.After(10 * time.Second)
	for waiting := true; waiting; {
		select {
		case ev := <-events:
			waiting = ev.Queue == nil || ev.Queue.Name != queue
		case <-producerPaused:
			t.Fatal("the queue's row says paused, yet River's producer did not pause it within 10s")
		}
	}
	for i := range 10 {
		if _, err := rc.Insert(ctx, EmailArgs{N: i}, &river.InsertOpts{Queue: queue}); err != nil {
			t.Fatal(err)
		}
	}
	// Fetching is off: jobs inserted later into an unpaced queue of the
	// same client are fetched and worked, three rounds of them, while
	// none of the paused queue's is even attempted (the middleware would
	// have snoozed each, setting attempted_at).
	var attempted int
	for round := range 3 {
		if _, err := rc.Insert(ctx, EmailArgs{N: 100 + round}, &river.InsertOpts{Queue: control}); err != nil {
			t.Fatal(err)
		}
		pgtest.Eventually(t, 10*time.Second, func() error {
			var left int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND state <> 'completed'`, control).Scan(&left); err != nil {
				return err
			}
			if left > 0 {
				return fmt.Errorf("%d control jobs not worked", left)
			}
			return nil
		})
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND attempted_at IS NOT NULL`, queue).Scan(&attempted); err != nil {
		t.Fatal(err)
	}
	if attempted != 0 {
		t.Fatalf("%d jobs fetched from a paused queue", attempted)
	}
	// The guard stops (its process ends) with the queue paused.
	stop()
	err = <-done
	guardStopped = true
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	if !paused() {
		t.Fatal("the queue was resumed by the guard's exit while the hold applies")
	}

	// The hold ends; a new guard, which did not pause the queue, resumes
	// it from the mark the first one left, and the jobs are worked.
	release(h)
	if err := newGuard(time.Minute).Step(ctx); err != nil {
		t.Fatal(err)
	}
	if paused() {
		t.Fatal("the queue stays paused after its hold ended")
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'completed'`, queue).Scan(&n); err != nil {
			return err
		}
		if n < 10 {
			return fmt.Errorf("%d of the paused queue's 10 jobs worked", n)
		}
		return nil
	})

	// An operator's pause (made in River, not by a guard) is not lifted.
	if err := rc.QueuePause(ctx, queue, nil); err != nil {
		t.Fatal(err)
	}
	if err := newGuard(time.Minute).Step(ctx); err != nil {
		t.Fatal(err)
	}
	if !paused() {
		t.Fatal("the guard resumed a pause an operator made")
	}
}

// Want follows the last pausing hold: a ratio hold never pauses the queue,
// and neither does a pause that is not a hold (a critical pause ends on
// its own and is left to snoozes).
func TestQueueGuardWant(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	g, err := riverpace.NewQueueGuard(riverpace.QueueGuardConfig{Client: fakeQueues{}, Queue: "q", Pacer: fixedStatus{}, Threshold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := func(id string, d time.Duration, ratio float64) hold.Hold {
		return hold.Hold{ID: id, Expires: now.Add(d), Ratio: ratio}
	}
	for _, tc := range []struct {
		name  string
		st    status.JobStatus
		pause bool
		hold  string
	}{
		{"running", status.JobStatus{Code: status.CodeRunning}, false, ""},
		{"critical", status.JobStatus{Code: status.CodeCritical}, false, ""},
		{"short hold", status.JobStatus{Code: status.CodeHeld, Holds: []hold.Hold{h("h1", 30*time.Minute, 0)}}, false, ""},
		{"long hold", status.JobStatus{Code: status.CodeHeld, Holds: []hold.Hold{h("h1", 2*time.Hour, 0)}}, true, "h1"},
		{"short and long", status.JobStatus{Code: status.CodeHeld, Holds: []hold.Hold{h("h1", 30*time.Minute, 0), h("h2", 3*time.Hour, 0)}}, true, "h2"},
		{"long ratio hold", status.JobStatus{Code: status.CodeHeld, Holds: []hold.Hold{h("h1", 30*time.Minute, 0), h("h2", 3*time.Hour, 0.5)}}, false, ""},
	} {
		if pause, hold := g.Want(tc.st, now); pause != tc.pause || hold != tc.hold {
			t.Errorf("%s: Want = %v, %q; want %v, %q", tc.name, pause, hold, tc.pause, tc.hold)
		}
	}
	for _, cfg := range []riverpace.QueueGuardConfig{
		{Queue: "q", Pacer: fixedStatus{}},
		{Client: fakeQueues{}, Pacer: fixedStatus{}},
		{Client: fakeQueues{}, Queue: "*", Pacer: fixedStatus{}},
		{Client: fakeQueues{}, Queue: "q"},
		{Client: fakeQueues{}, Queue: "q", Pacer: fixedStatus{}, Threshold: -time.Second},
	} {
		if _, err := riverpace.NewQueueGuard(cfg); err == nil {
			t.Errorf("NewQueueGuard(%+v) accepted", cfg)
		}
	}
}

type fixedStatus struct{ status.JobStatus }

func (f fixedStatus) Status() status.JobStatus { return f.JobStatus }

type fakeQueues struct{ riverpace.QueueClient }
