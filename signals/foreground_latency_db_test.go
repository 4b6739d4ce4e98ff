package signals

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// migrate creates throttled's schema (and so the canary table) on the
// pair's primary.
func migrate(t *testing.T, c *pgcluster.Cluster) {
	t.Helper()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
}

// adminExec runs q on the primary as the admin role.
func adminExec(t *testing.T, c *pgcluster.Cluster, q string) {
	t.Helper()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// runPoller runs p until the test ends.
func runPoller(t *testing.T, p *Poller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// latest returns p's latest sample of name, or an error when there is
// none, it failed or it is stale.
func latest(p *Poller, name Name) (Sample, error) {
	snap := p.Snapshot()
	s, ok := snap.Get(name, nil)
	switch {
	case !ok:
		return s, fmt.Errorf("%s not sampled yet", name)
	case s.Err != nil:
		return s, s.Err
	case snap.Stale(s):
		return s, fmt.Errorf("%s is stale", name)
	}
	return s, nil
}

// writeLoad starts n sessions named as a job's ("throttled:cleanup"),
// each committing small INSERTs with synchronous_commit on in a loop: the
// write-heavy cleanup whose commits every foreground commit queues
// behind. It returns once all n are active; the returned stop ends them.
// users runs a light foreground until the test ends: one session, not
// throttled's, committing a small statement every 100 ms, so the canary
// has a foreground to protect (with none it reads 1 whatever its own
// commit waits for).
func users(t *testing.T, c *pgcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := pgx.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "test_foreground"
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	ccancel()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; conn.Close(context.Background()) })
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = conn.Exec(ctx, "SELECT 1")
			}
		}
	}()
}

func writeLoad(t *testing.T, c *pgcluster.Cluster, n int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var once sync.Once
	var mu sync.Mutex
	var errs []error
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	cfg, err := pgx.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = JobAppPrefix + "cleanup"
	cfg.RuntimeParams["synchronous_commit"] = "on"
	const loop = `DO $$
DECLARE stop_at timestamptz := clock_timestamp() + interval '2 minutes';
BEGIN
  WHILE clock_timestamp() < stop_at LOOP
    INSERT INTO throttled_fault_wal (pad) SELECT repeat('x', 200) FROM generate_series(1, 20);
    COMMIT;
  END LOOP;
END $$`
	for range n {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		ccancel()
		if err != nil {
			stop()
			t.Fatal(err)
		}
		wg.Go(func() {
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, loop); err != nil && ctx.Err() == nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	probe := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	pgtest.Eventually(t, 10*time.Second, func() error {
		var active int
		err := probe.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active'`, JobAppPrefix+"cleanup").Scan(&active)
		if err == nil && active < n {
			mu.Lock()
			err = fmt.Errorf("%d of %d write sessions active: %w", active, n, errors.Join(errs...))
			mu.Unlock()
		}
		return err
	})
	return stop
}

// canaryPoller returns a connected poller with the canary on, at its
// default interval and window.
func canaryPoller(t *testing.T, c *pgcluster.Cluster, mod func(*Config)) *Poller {
	t.Helper()
	return newPoller(t, c, func(cfg *Config) {
		cfg.ReplicaDSNs = nil
		cfg.ForegroundLatency = true
		cfg.Interval = 100 * time.Millisecond
		if mod != nil {
			mod(cfg)
		}
	})
}

func TestForegroundLatencyIsOffByDefault(t *testing.T) {
	c := pgtest.Cluster(t)
	migrate(t, c)
	p := newPoller(t, c, nil)
	tick(t, p, PrimaryLoad, "")
	for _, n := range []Name{ForegroundLatency, ForegroundLatencySeconds} {
		if s, ok := p.Snapshot().Get(n, nil); ok {
			t.Errorf("%s sampled without ForegroundLatency: %+v", n, s)
		}
	}
	for _, st := range p.Stats() {
		if st.Server == "canary" {
			t.Errorf("a canary sampler runs without ForegroundLatency: %+v", st)
		}
	}
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", CanaryAppName).Scan(&n); err != nil || n != 0 {
		t.Errorf("canary sessions without ForegroundLatency: %d, %v", n, err)
	}
}

// The canary learns its baseline from probes that saw no job at work,
// reads near 1.0 on a primary with a light foreground and no job, and rises when a job's sessions
// commit many small writes,
// and clearly when they keep the CPUs busy. On the test pair fsync is off,
// so a commit's WAL flush costs nothing and the writes show only through
// CPU queueing and WAL-insert locks; on a real disk the flush wait adds to
// it. Between the loads the ratio returns near 1.0: the baseline held
// still while the jobs worked.
func TestForegroundLatencyNearOneIdleRisesUnderJobLoad(t *testing.T) {
	c := pgtest.Cluster(t)
	migrate(t, c)
	users(t, c)
	p := canaryPoller(t, c, nil)
	runPoller(t, p)

	// Warm-up: the latency is known at once, the ratio is unknown (never 1
	// or 0) until 20 job-free probes.
	pgtest.Eventually(t, 5*time.Second, func() error {
		_, err := latest(p, ForegroundLatencySeconds)
		return err
	})
	if s, err := latest(p, ForegroundLatency); !errors.Is(err, ErrBaselineWarmup) || s.Value != 0 || s.Raw != 0 {
		t.Fatalf("foreground_latency before a baseline: value %v raw %v err %v; want ErrBaselineWarmup and no value", s.Value, s.Raw, err)
	}
	nearOne := func(what string) {
		t.Helper()
		pgtest.Eventually(t, 30*time.Second, func() error {
			s, err := latest(p, ForegroundLatency)
			if err != nil {
				return err
			}
			if s.Unit != UnitRatio || s.Value < 0.6 || s.Value > 1.3 {
				return fmt.Errorf("%s: foreground_latency %.2f %s; want near 1.0", what, s.Value, s.Unit)
			}
			return nil
		})
	}
	rises := func(what string, atLeast float64) {
		t.Helper()
		pgtest.Eventually(t, 20*time.Second, func() error {
			s, err := latest(p, ForegroundLatency)
			if err != nil {
				return err
			}
			if s.Value < atLeast {
				return fmt.Errorf("%s: foreground_latency %.2f (raw %.2f); want at least %v", what, s.Value, s.Raw, atLeast)
			}
			return nil
		})
	}
	nearOne("idle")
	secs, _ := latest(p, ForegroundLatencySeconds)
	if secs.Unit != UnitSeconds || !(secs.Raw > 0) || secs.Raw > 1 {
		t.Fatalf("foreground_latency_seconds %v raw %v %s; want a positive number of seconds", secs.Value, secs.Raw, secs.Unit)
	}

	stop := writeLoad(t, c, 24)
	rises("under job writes", 1.5)
	stop()
	nearOne("after the writes")

	cpu, err := c.CPULoad(context.Background(), 6, time.Minute, JobAppPrefix+"busy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cpu.Stop() })
	rises("under a CPU-bound job", 2.5)
	if err := cpu.Stop(); err != nil {
		t.Fatal(err)
	}
	nearOne("after the CPU-bound job")
}

// The canary fails closed: without the grant on its table, and on a hung
// primary, both foreground signals carry an error and no value, and
// recover once the cause is gone.
func TestForegroundLatencyFailsClosedWithoutGrant(t *testing.T) {
	c := pgtest.Cluster(t)
	migrate(t, c)
	p := canaryPoller(t, c, nil)
	pgtest.Eventually(t, 5*time.Second, func() error {
		return tick(t, p, ForegroundLatencySeconds, "").Err
	})
	t.Cleanup(func() { adminExec(t, c, "GRANT SELECT, UPDATE ON throttled.canary TO pg_monitor") })
	adminExec(t, c, "REVOKE UPDATE ON throttled.canary FROM pg_monitor")
	tick(t, p, PrimaryLoad, "")
	snap := p.Snapshot()
	for _, n := range []Name{ForegroundLatency, ForegroundLatencySeconds} {
		s := get(t, snap, n, "")
		if !errors.Is(s.Err, ErrCanary) || s.Value != 0 || s.Raw != 0 || !strings.Contains(s.Err.Error(), "pg_monitor") {
			t.Errorf("%s without the grant: value %v raw %v err %v; want ErrCanary naming the grant", n, s.Value, s.Raw, s.Err)
		}
	}
	if s := get(t, snap, PrimaryLoad, ""); s.Err != nil {
		t.Errorf("primary_load failed with the canary: %v", s.Err)
	}
	adminExec(t, c, "GRANT SELECT, UPDATE ON throttled.canary TO pg_monitor")
	if s := tick(t, p, ForegroundLatencySeconds, ""); s.Err != nil || !(s.Raw > 0) {
		t.Fatalf("foreground_latency_seconds after the grant came back: %v, %v", s.Raw, s.Err)
	}
}

func TestForegroundLatencyFailsClosedOnHungPrimary(t *testing.T) {
	c := pgtest.Cluster(t)
	migrate(t, c)
	const timeout = 500 * time.Millisecond
	p := canaryPoller(t, c, func(cfg *Config) { cfg.Timeout = timeout })
	runPoller(t, p)
	pgtest.Eventually(t, 5*time.Second, func() error {
		_, err := latest(p, ForegroundLatencySeconds)
		return err
	})
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	hungAt := time.Now()
	pgtest.Eventually(t, 10*time.Second, func() error {
		for _, n := range []Name{ForegroundLatency, ForegroundLatencySeconds} {
			s, _ := p.Snapshot().Get(n, nil)
			if !errors.Is(s.Err, ErrCanary) || !errors.Is(s.Err, ErrTimeout) || s.Value != 0 || s.At.Before(hungAt) {
				return fmt.Errorf("%s on a hung primary: value %v err %v; want a timed-out canary", n, s.Value, s.Err)
			}
		}
		return nil
	})
	c.ResumePrimary()
	pgtest.Eventually(t, 15*time.Second, func() error {
		_, err := latest(p, ForegroundLatencySeconds)
		return err
	})
}

// Without throttled's schema in the primary's database, the canary fails
// at start with what to do, and every sample after that carries the error.
func TestForegroundLatencyWithoutCanaryTableFailsAtStart(t *testing.T) {
	c := pgtest.Cluster(t)
	const db = "throttled_nocanary"
	adminExec(t, c, "DROP DATABASE IF EXISTS "+db)
	adminExec(t, c, "CREATE DATABASE "+db)
	t.Cleanup(func() { adminExec(t, c, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	dsn := strings.Replace(c.Primary.DSN(pgcluster.RoleMonitor), "/postgres?", "/"+db+"?", 1)
	p, err := New(Config{PrimaryDSN: dsn, Cores: 2, ForegroundLatency: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.Connect(ctx)
	if !errors.Is(err, ErrCanary) || !strings.Contains(err.Error(), "throttled migrate") {
		t.Fatalf("Connect without the canary table: %v; want ErrCanary saying to run throttled migrate", err)
	}
	p.Tick(ctx)
	for _, n := range []Name{ForegroundLatency, ForegroundLatencySeconds} {
		if s := get(t, p.Snapshot(), n, ""); !errors.Is(s.Err, ErrCanary) || s.Value != 0 {
			t.Errorf("%s without the canary table: value %v err %v; want ErrCanary", n, s.Value, s.Err)
		}
	}
}

// probeConn migrates the primary and returns a monitor-role connection
// that commits as the canary's does (synchronous_commit on), for tests
// that call probe themselves, with a context bounding the test's waits.
func probeConn(t *testing.T, c *pgcluster.Cluster) (context.Context, *pgx.Conn) {
	t.Helper()
	migrate(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	mon := pgtest.Connect(t, c.Primary, pgcluster.RoleMonitor)
	if _, err := mon.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	return ctx, mon
}

// A job statement queued on a heavyweight lock is not at work: the probe
// committed meanwhile does not count it. One running is.
func TestCanaryDoesNotCountAJobWaitingOnALock(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, mon := probeConn(t, c)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := func() int64 {
		t.Helper()
		r, err := probe(ctx, mon)
		if err != nil {
			t.Fatal(err)
		}
		return r.jobs
	}
	if n := jobs(); n != 0 {
		t.Fatalf("no job session: the probe counted %d at work", n)
	}

	holder := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE throttled_fault_lock IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// start runs q on a new session named as a job's until it returns.
	start := func(name, q string) (wait func() error) {
		cfg, err := pgx.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = JobAppPrefix + name
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		done := make(chan error, 1)
		go func() { _, err := conn.Exec(ctx, q); done <- err }()
		pgtest.Eventually(t, 10*time.Second, func() error {
			var state string
			err := mon.QueryRow(ctx, `SELECT coalesce(state, '') || '/' || coalesce(wait_event_type, '') FROM pg_stat_activity
				WHERE application_name = $1`, JobAppPrefix+name).Scan(&state)
			if err == nil && !strings.HasPrefix(state, "active/") {
				err = fmt.Errorf("job session %q is %q, not active yet", name, state)
			}
			return err
		})
		return func() error { return <-done }
	}
	waiting := start("cleanup", "DELETE FROM throttled_fault_lock")
	pgtest.Eventually(t, 10*time.Second, func() error {
		var wait string
		err := mon.QueryRow(ctx, `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity
			WHERE application_name = $1`, JobAppPrefix+"cleanup").Scan(&wait)
		if err == nil && wait != "Lock" {
			err = fmt.Errorf("job session waits on %q, not yet on the lock", wait)
		}
		return err
	})
	if n := jobs(); n != 0 {
		t.Fatalf("a job session queued on a lock: the probe counted %d at work; want 0", n)
	}

	sleeping := start("backfill", "SELECT pg_sleep(30)")
	if n := jobs(); n != 1 {
		t.Fatalf("a job session running and one queued on a lock: the probe counted %d at work; want 1", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waiting(); err != nil {
		t.Fatalf("the queued job statement after the lock's release: %v", err)
	}
	cancel()
	_ = sleeping()
}

// The canary counts the users' sessions, not throttled's: a session
// that ran a statement within the last two seconds and is not
// throttled's counts; a library job's pooled connection, named only
// inside each batch's transaction, counts as the job's between batches
// once a probe saw it in one; and an idle session stops counting.
func TestCanaryCountsTheUsersNotTheJobBetweenBatches(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, mon := probeConn(t, c)
	s := &canarySampler{}
	users := func(s *canarySampler) int {
		t.Helper()
		r, err := probe(ctx, mon)
		if err != nil {
			t.Fatal(err)
		}
		return s.users(r, time.Now())
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		if n := users(s); n != 0 {
			return fmt.Errorf("%d users seen; want none once the test's setup sessions are idle", n)
		}
		return nil
	})

	job := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	tx, err := job.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('application_name', $1, true)", JobAppPrefix+"purge"); err != nil {
		t.Fatal(err)
	}
	if n := users(s); n != 0 {
		t.Fatalf("a job's session in its batch: %d users; want 0", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := users(s); n != 0 {
		t.Fatalf("a job's session between batches, seen in a batch before: %d users; want 0", n)
	}
	if n := users(&canarySampler{}); n != 1 {
		t.Fatalf("a job's session between batches, never seen in one: %d users; want 1 (not known to be the job's)", n)
	}

	// A ping is no user's work: a job held for long asks its database
	// whether it answers with one (jobs' outage probe), on a pooled
	// connection no batch has named, and a pool checks an idle
	// connection with one.
	pinger := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if n := users(s); n != 0 {
			return fmt.Errorf("%d users; want none once the new session is idle", n)
		}
		return nil
	})
	if err := pinger.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := users(&canarySampler{}); n != 0 {
		t.Fatalf("a session idle after a ping: %d users; want 0", n)
	}

	user := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := user.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if n := users(s); n != 1 {
		t.Fatalf("a user's session that just ran a statement: %d users; want 1", n)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		if n := users(s); n != 0 {
			return fmt.Errorf("%d users; want none once the user's session is idle", n)
		}
		return nil
	})
}
