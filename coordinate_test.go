package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
)

func coordinated(t *testing.T, c *pgcluster.Cluster, budget float64) throttled.Options {
	t.Helper()
	return throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Controller: throttle.Config{MaxBudget: budget, InitialBudget: budget}}
}

// leaderAndFollower opens two clients with opts (closed when the test
// ends), the first once it leads.
func leaderAndFollower(t *testing.T, opts throttled.Options) (leader, follower *throttled.Client) {
	t.Helper()
	ctx := context.Background()
	a, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	pgtest.Eventually(t, 10*time.Second, func() error {
		if !a.Leader() {
			return errors.New("first process does not lead yet")
		}
		return nil
	})
	b, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

// runningJob opens a client with opts (closed when the test ends) and
// returns it with job's pacer, once the job runs.
func runningJob(t *testing.T, opts throttled.Options, job string) (*throttled.Client, throttled.Pacer) {
	t.Helper()
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	p, err := tc.Pacer(jobs.Config{Name: job})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return running(p) })
	return tc, p
}

func running(p throttled.Pacer) error {
	if st, r, _, _ := p.Explain(); st == string(throttle.JobPaused) {
		return fmt.Errorf("%s: %s", st, r)
	}
	return nil
}

// An in-process hold (Client.Holds) pauses this process's jobs in
// coordinated mode even when another process leads and never sees it.
func TestNonLeaderHonoursItsInProcessHolds(t *testing.T) {
	c := pgtest.Cluster(t)
	_, b := leaderAndFollower(t, coordinated(t, c, 20))
	p, err := b.Pacer(jobs.Config{Name: "local-hold"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error { return running(p) })
	if b.Leader() {
		t.Fatal("second process leads; the test needs a follower")
	}
	if _, err := b.Holds().Add(throttle.HoldRequest{Scope: throttle.OneJob("local-hold"), Source: throttle.SourceManual, Reason: "stop", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 2*time.Second, func() error {
		if running(p) == nil {
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

// Every worker stops within its lease when the database hangs, however
// many jobs the process runs: heartbeats do not queue behind each other.
func TestEveryWorkerStopsWithinTheLease(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, coordinated(t, c, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var ps []throttled.Pacer
	for i := range 8 {
		p, err := tc.Pacer(jobs.Config{Name: fmt.Sprintf("lease-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		for _, p := range ps {
			if err := running(p); err != nil {
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
			if running(p) == nil {
				return errors.New("a worker still runs")
			}
		}
		return nil
	})
	if d := time.Since(hungAt); d > throttled.DefaultLease+time.Second {
		t.Errorf("the last worker paused %s after the hang; its lease is %s", d, throttled.DefaultLease)
	}
}

// A worker that has never been leased waits for its first allocation; it
// does not report the coordination database as unreachable while it
// answers (a new row's lease is -infinity, which must read as expired).
func TestNewWorkerWaitsForItsFirstLeaseQuietly(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, err := throttled.Open(context.Background(), coordinated(t, c, 20))
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
		_, r, _, _ := p.Explain()
		seen[r] = true
		return running(p)
	})
	for r := range seen {
		if strings.Contains(r, "cannot reach") {
			t.Errorf("a new worker reported %q while the database was up", r)
		}
	}
}

// When the holds cannot be confirmed, a job says so first, even under an
// in-process hold of its own: the state is unknown, not merely held
// (the sidecar's /check then answers 500, not 417).
func TestUnconfirmedHoldsOutrankALocalHold(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := runningJob(t, coordinated(t, c, 20), "unconfirmed-first")
	if _, err := tc.Holds().Add(throttle.HoldRequest{Scope: throttle.OneJob("unconfirmed-first"), Source: throttle.SourceManual,
		Reason: "local", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if _, r, _, _ := p.Explain(); !strings.Contains(r, "unconfirmed") {
			return fmt.Errorf("job says %q", r)
		}
		return nil
	})
	if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
		t.Fatal("the job does not report itself unavailable while the holds are unconfirmed")
	}
	c.ResumePrimary()
}
