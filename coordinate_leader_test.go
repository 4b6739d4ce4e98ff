package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// "After any pause (critical, stale, a hold) work restarts at SlowStart
// of the budget before it, never at the old rate": a coordinated leader
// decides through a stale primary sample too, so it slow-starts after.
func TestCoordinatedLeaderSlowStartsAfterStaleSignals(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := runningJob(t, coordinated(t, c, 20), "stale-restart")
	pgtest.Eventually(t, 20*time.Second, func() error {
		if d := tc.Decision(); !tc.Leader() || d.Budget != 20 {
			return fmt.Errorf("leader %v, budget %v", tc.Leader(), d.Budget)
		}
		return running(p)
	})
	before := tc.Decision().Budget
	restore := loseSampler(t, c)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if running(p) == nil {
			return errors.New("still running with no sample of the primary")
		}
		return nil
	})
	restore()
	pgtest.Eventually(t, 30*time.Second, func() error { return running(p) })
	d := tc.Decision()
	if max := before * 0.25; d.Budget > max {
		t.Errorf("first decision after the stale episode: budget %v (mode %s); want at most SlowStart of %v = %v", d.Budget, d.Mode, before, max)
	}
	if _, r, _, rate := p.Explain(); rate > before*0.25 {
		t.Errorf("job restarted at %v/s (%s); want at most %v", rate, r, before*0.25)
	}
}

// A coordinated leader decides "stale" when the primary's sample is: the
// audit log and the pager (which pages on a long stale decision) see it.
func TestCoordinatedLeaderReportsStaleMode(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := runningJob(t, coordinated(t, c, 20), "stale-mode")
	loseSampler(t, c)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if d := tc.Decision(); d.Mode != "stale" {
			st, r, _, _ := p.Explain()
			return fmt.Errorf("leader's decision is %q (%s), made at %s; the job is %s: %s", d.Mode, d.Reason, d.At.Format(time.TimeOnly), st, r)
		}
		return nil
	})
}

// loseSampler stops the sampler reaching the primary (its role cannot log
// in, its sessions end) while the coordination database, another role,
// stays up; it returns how to let it back, which also runs at cleanup.
func loseSampler(t *testing.T, c *pgcluster.Cluster) (restore func()) {
	t.Helper()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	restore = func() {
		if _, err := admin.Exec(context.Background(), "ALTER ROLE "+pgcluster.RoleMonitor+" LOGIN"); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	for _, q := range []string{
		"ALTER ROLE " + pgcluster.RoleMonitor + " NOLOGIN",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + pgcluster.RoleMonitor + "'",
	} {
		if _, err := admin.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	return restore
}
