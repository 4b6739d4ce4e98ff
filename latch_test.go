package throttled_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// latching is coordinated mode where one session on CPU (of 2 cores),
// 0.5, is critical, and the first critical pause latches.
func latching(t *testing.T, c *pgcluster.Cluster) throttled.Options {
	opts := clienttest.Coordinated(t, c, 20)
	opts.Controller.Rules = map[signals.Name]throttle.Rule{signals.PrimaryLoad: {Target: 0.2, Critical: 0.5, Required: true}}
	opts.Controller.LatchAfter = 1
	return opts
}

// latch runs job on tc until one busy session latches a critical pause,
// then ends the load: it returns the job's pacer, paused and latched with
// the primary calm again.
func latch(t *testing.T, c *pgcluster.Cluster, tc *throttled.Client, job string) throttled.JobPacer {
	t.Helper()
	p, err := tc.Pacer(jobs.Config{Name: job})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(p) })
	load, err := c.CPULoad(context.Background(), 1, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { load.Stop() })
	pgtest.Eventually(t, 20*time.Second, func() error {
		js := p.Status()
		st, r := js.State, js.Reason
		if st != status.JobPaused || !strings.Contains(r, "latched") {
			return errors.New("not latched yet: " + string(st) + ": " + r)
		}
		return nil
	})
	load.Stop()
	return p
}

// stillPaused fails the test if p runs within d.
func stillPaused(t *testing.T, p throttled.JobPacer, d time.Duration, what string) {
	t.Helper()
	pgtest.Steady(t, d, func() error {
		if clienttest.Running(p) == nil {
			js := p.Status()
			st, r := js.State, js.Reason
			return errors.New(what + " ended a latched critical pause; job now " + string(st) + ": " + r)
		}
		return nil
	})
}

// A latched critical pause lasts until a person resumes: a configuration
// reload (Client.Reconfigure, what `throttled run` does on every reload)
// keeps it.
func TestReloadDoesNotEndALatchedCriticalPause(t *testing.T) {
	c := pgtest.Cluster(t)
	opts := latching(t, c)
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p := latch(t, c, tc, "latch-job")
	stillPaused(t, p, 2*time.Second, "the calm primary")
	if err := tc.Reconfigure(opts.Controller); err != nil { // a reload that changes nothing
		t.Fatal(err)
	}
	stillPaused(t, p, 5*time.Second, "a reload")
}

// The same latch survives a leader failover: the new leader takes over
// the critical pause the last one published.
func TestFailoverDoesNotEndALatchedCriticalPause(t *testing.T) {
	c := pgtest.Cluster(t)
	a, b := clienttest.LeaderAndFollower(t, latching(t, c))
	p := latch(t, c, b, "latch-failover")
	a.Close() // the leader goes away (deploy, crash)
	pgtest.Eventually(t, 10*time.Second, func() error {
		if !b.Leader() {
			return errors.New("b does not lead yet")
		}
		return nil
	})
	stillPaused(t, p, 6*time.Second, "a leader failover")
}

// In coordinated mode a person ends a latched critical pause through the
// leader (Client.ResumeLatched), whichever process they ask.
func TestResumeReachesTheLeadersLatch(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, latching(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p := latch(t, c, tc, "latch-resume")
	stillPaused(t, p, 2*time.Second, "the calm primary")
	if err := tc.ResumeLatched(ctx, "alice", "load gone, checked"); err != nil {
		t.Fatalf("ResumeLatched while the leader's decision is latched (%s): %v", tc.Decision().Reason, err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(p) })
	if err := tc.ResumeLatched(ctx, "alice", "again"); !errors.Is(err, throttled.ErrNotLatched) {
		t.Fatalf("a second resume: %v; want ErrNotLatched", err)
	}
}
