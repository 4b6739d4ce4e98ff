package coord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// Workers: their leases, the holds they apply, what their heartbeat writes.

// The lease outlives the leader's tick: with a Tick over 3 s no worker's
// lease lapses between publications while nothing is wrong.
func TestLeaseOutlivesTheTick(t *testing.T) {
	c := pgtest.Cluster(t)
	opts := clienttest.Coordinated(t, c, 20)
	opts.Controller.Tick = 4 * time.Second
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p, err := tc.Pacer(jobs.Config{Name: "tick-lease"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(p) })
	pgtest.Steady(t, 2*opts.Controller.Tick, func() error { return clienttest.Running(p) })
}

// Every worker stops within its lease when the database hangs, however
// many jobs the process runs: heartbeats do not queue behind each other.
func TestEveryWorkerStopsWithinTheLease(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, clienttest.Coordinated(t, c, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var ps []throttled.JobPacer
	for i := range 8 {
		p, err := tc.Pacer(jobs.Config{Name: fmt.Sprintf("lease-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		for _, p := range ps {
			if err := clienttest.Running(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	hungAt := time.Now()
	pgtest.Eventually(t, 30*time.Second, func() error {
		for _, p := range ps {
			if clienttest.Running(p) == nil {
				return errors.New("a worker still runs")
			}
		}
		return nil
	})
	if d := time.Since(hungAt); d > coord.DefaultLease+time.Second {
		t.Errorf("the last worker paused %s after the hang; its lease is %s", d, coord.DefaultLease)
	}
}

// A worker that has never been leased waits for its first allocation; it
// does not report the coordination database as unreachable while it
// answers (a new row's lease is -infinity, which must read as expired).
func TestNewWorkerWaitsForItsFirstLeaseQuietly(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, err := throttled.Open(context.Background(), clienttest.Coordinated(t, c, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p, err := tc.Pacer(jobs.Config{Name: "first-lease"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	pgtest.Eventually(t, 15*time.Second, func() error {
		js := p.Status()
		r := js.Reason
		seen[r] = true
		return clienttest.Running(p)
	})
	for r := range seen {
		if strings.Contains(r, "cannot reach") {
			t.Errorf("a new worker reported %q while the database was up", r)
		}
	}
}

// An in-process hold (Client.Holds) pauses this process's jobs in
// coordinated mode even when another process leads and never sees it.
func TestNonLeaderHonoursItsInProcessHolds(t *testing.T) {
	c := pgtest.Cluster(t)
	_, b := clienttest.LeaderAndFollower(t, clienttest.Coordinated(t, c, 20))
	p, err := b.Pacer(jobs.Config{Name: "local-hold"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error { return clienttest.Running(p) })
	if b.Leader() {
		t.Fatal("second process leads; the test needs a follower")
	}
	if _, err := b.LocalHolds().Add(hold.Request{Scope: hold.OneJob("local-hold"), Source: hold.SourceManual, Reason: "stop", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 2*time.Second, func() error {
		if clienttest.Running(p) == nil {
			return errors.New("still running under its own process's hold")
		}
		return nil
	})
	// And it stays paused: the leader's next allocation does not undo it.
	pgtest.Steady(t, 3*time.Second, func() error {
		if done, ok := p.Allow(); ok {
			done(0, 0, nil)
			return errors.New("the follower's job got a token under its own hold")
		}
		return nil
	})
}

// When the holds cannot be confirmed, a job says so first, even under an
// in-process hold of its own: the state is unknown, not merely held
// (the sidecar's /check then answers 500, not 417).
func TestUnconfirmedHoldsOutrankALocalHold(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 20), "unconfirmed-first")
	if _, err := tc.LocalHolds().Add(hold.Request{Scope: hold.OneJob("unconfirmed-first"), Source: hold.SourceManual,
		Reason: "local", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	// The status says so by its holds and code, not by its text (which
	// names the job, "unconfirmed-first", from the start).
	pgtest.Eventually(t, 15*time.Second, func() error {
		if st := p.Status(); len(st.Holds) == 0 || st.Holds[0].ID != holds.UnconfirmedHoldID {
			return fmt.Errorf("job says %s: %q", st.Code, st.Reason)
		}
		return nil
	})
	if st := p.Status(); st.Code != status.CodeUnavailable {
		t.Fatalf("status %s (%q) while the holds are unconfirmed; want unavailable", st.Code, st.Reason)
	}
	if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
		t.Fatal("the job does not report itself unavailable while the holds are unconfirmed")
	}
	c.ResumePrimary()
}

// A coordinated worker's heartbeat writes where its job's time went in its
// process, so `throttled status` read from the database says it too: the
// seconds in the row grow and match the process's own count.
func TestWorkerHeartbeatWritesLimitedSeconds(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, _ := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 10), "limited_rows")
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleMonitor)
	var first float64
	pgtest.Eventually(t, 20*time.Second, func() error {
		_, _, ws, err := store.New(conn).Status(context.Background(), 10*time.Second)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.Job != "limited_rows" {
				continue
			}
			total := 0.0
			for _, s := range w.LimitedSeconds {
				total += s
			}
			switch {
			case total <= 0:
				return fmt.Errorf("worker %s: limited_seconds %v", w.ID, w.LimitedSeconds)
			case first == 0:
				first = total
				return errors.New("seen once; waiting for the next heartbeat")
			case total <= first:
				return fmt.Errorf("limited_seconds did not grow: %v then %v", first, total)
			}
			own := 0.0
			for _, s := range tc.LimitedSeconds("limited_rows") {
				own += s
			}
			if total > own+0.001 {
				return fmt.Errorf("the row says %.3f s, more than the process counted (%.3f s)", total, own)
			}
			return nil
		}
		return errors.New("no worker row for limited_rows yet")
	})
}
