package coord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// The leader: what it decides without a sample, and what it takes over.

// "After any pause (critical, stale, a hold) work restarts at SlowStart
// of the budget before it, never at the old rate": a coordinated leader
// decides through a stale primary sample too, so it slow-starts after.
func TestCoordinatedLeaderSlowStartsAfterStaleSignals(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 20), "stale-restart")
	pgtest.Eventually(t, 20*time.Second, func() error {
		if d := tc.Decision(); !tc.Leader() || d.Budget != 20 {
			return fmt.Errorf("leader %v, budget %v", tc.Leader(), d.Budget)
		}
		return clienttest.Running(p)
	})
	before := tc.Decision().Budget
	restore := loseSampler(t, c)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if clienttest.Running(p) == nil {
			return errors.New("still running with no sample of the primary")
		}
		return nil
	})
	restore()
	pgtest.Eventually(t, 30*time.Second, func() error { return clienttest.Running(p) })
	d := tc.Decision()
	if max := before * 0.25; d.Budget > max {
		t.Errorf("first decision after the stale episode: budget %v (mode %s); want at most SlowStart of %v = %v", d.Budget, d.Mode, before, max)
	}
	js := p.Status()
	r, rate := js.Reason, js.Rate
	if rate > before*0.25 {
		t.Errorf("job restarted at %v/s (%s); want at most %v", rate, r, before*0.25)
	}
}

// A coordinated leader decides "stale" when the primary's sample is: the
// audit log and the pager (which pages on a long stale decision) see it.
func TestCoordinatedLeaderReportsStaleMode(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, p := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 20), "stale-mode")
	loseSampler(t, c)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if d := tc.Decision(); d.Mode != "stale" {
			js := p.Status()
			st, r := js.State, js.Reason
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

// published waits for a leader's publication after since and returns it.
func published(t *testing.T, admin *pgx.Conn, since time.Time) (budget float64, mode, reason string) {
	t.Helper()
	pgtest.Eventually(t, 15*time.Second, func() error {
		var at time.Time
		err := admin.QueryRow(context.Background(), "SELECT budget, mode, reason, published_at FROM throttled.leader WHERE id = 1").Scan(&budget, &mode, &reason, &at)
		if err == nil && !at.After(since) {
			err = errors.New("no publication yet")
		}
		return err
	})
	return budget, mode, reason
}

// What users saw on a 2-core pair: a cleanup ran during a CPU spike (the
// leader paused it, critical), then ten short-lived execs each became
// leader and each started at a quarter of the last budget, until the
// cluster's budget was 0.016 batches/s; two workers of job x and one of
// job y then started on an idle primary and showed "running ... rate
// 0.0/s" with no batch for 8 s and more. Now the budget is not ratcheted
// below the initial budget, dead workers' rows take no share, and every
// new worker's first batch starts within 2 s.
func TestColdStartAfterASpikeAndTenTakeovers(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	opts := clienttest.Coordinated(t, c, 10)
	opts.Controller.InitialBudget = 1
	opts.Controller.QuietPeriod = 2 * time.Second

	// The cleanup during a CPU spike: 4 spinning sessions on 2 cores.
	spike, err := c.CPULoad(ctx, 4, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = spike.Stop() })
	cleanup, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cleanup.Pacer(jobs.Config{Name: "cleanup"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		if d := cleanup.Decision(); d.Mode != "critical" {
			return fmt.Errorf("mode %s under the spike: %s", d.Mode, d.Reason)
		}
		return nil
	})
	pgtest.Eventually(t, 5*time.Second, func() error {
		var signal string
		if err := admin.QueryRow(ctx, "SELECT critical_signal FROM throttled.leader").Scan(&signal); err != nil || signal == "" {
			return fmt.Errorf("critical pause not published: %q %v", signal, err)
		}
		return nil
	})
	cleanup.Close() // the leader goes away inside the critical pause
	_ = spike.Stop()

	// Ten leaders, each gone a moment after its first publication.
	var budget float64
	for i := range 10 {
		var since time.Time
		if err := admin.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
			t.Fatal(err)
		}
		tc, err := throttled.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Pacer(jobs.Config{Name: "restart"}); err != nil {
			t.Fatal(err)
		}
		var mode, reason string
		budget, mode, reason = published(t, admin, since)
		tc.Close()
		if strings.Contains(reason, "reached 0 ") {
			t.Errorf("leader %d: %q names a reading of 0", i+1, reason)
		}
		t.Logf("leader %d: %s, budget %.3g: %s", i+1, mode, budget, reason)
	}

	// Rows of workers that died a while ago, and a new leader's workers:
	// two of job x (in two processes) and one of job y.
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.workers (id, job, heartbeat_at)
		VALUES ('dead:1/x', 'x', now() - interval '30 seconds'), ('dead:2/y', 'y', now() - interval '20 seconds')`); err != nil {
		t.Fatal(err)
	}
	type start struct {
		job   string
		took  time.Duration
		state string
		err   error
	}
	var mu sync.Mutex
	var starts []start
	var wg sync.WaitGroup
	for _, job := range []string{"x", "x", "y"} {
		tc, err := throttled.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		wg.Go(func() {
			begun := time.Now()
			p, err := tc.Pacer(jobs.Config{Name: job})
			if err != nil {
				mu.Lock()
				starts = append(starts, start{job: job, err: err})
				mu.Unlock()
				return
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			done, err := p.Wait(wctx)
			took := time.Since(begun)
			js := p.Status()
			state, reason, binding, rate := js.State, js.Reason, js.Binding, js.Rate
			if err == nil {
				done(1000, 10*time.Millisecond, nil)
			}
			mu.Lock()
			starts = append(starts, start{job: job, took: took, state: fmt.Sprintf("%s %q binding %q rate %.3g", state, reason, binding, rate), err: err})
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, s := range starts {
		t.Logf("job %s: first batch after %s (%s)", s.job, s.took.Round(time.Millisecond), s.state)
		if s.err != nil || s.took > 2*time.Second {
			t.Errorf("job %s: first batch after %s, err %v (%s); want within 2s on an idle primary", s.job, s.took.Round(time.Millisecond), s.err, s.state)
		}
	}
	var now time.Time
	if err := admin.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if b, mode, reason := published(t, admin, now); b < opts.Controller.InitialBudget {
		t.Errorf("after ten takeovers the cluster's budget is %.3g (%s: %s); want at least the initial %v", b, mode, reason, opts.Controller.InitialBudget)
	}
}
