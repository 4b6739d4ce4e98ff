package throttled_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// Fast when it is safe (issue 32): on the real pair, with the
// foreground-latency canary on as it is by default, a job runs near the
// ceiling its user gave it when nothing needs protecting, one slow canary
// probe is not an emergency, and a cut made by a real surge is undone
// within seconds once the surge is over.

// fastRate is the jobs' max_rate, in batches per second: the ceiling a
// user allows, as `throttled exec --max-rate` does.
const fastRate = 8.0

// fastRows is how many rows a job's table holds, and fastBatch how many
// one batch updates: small real batches, each a commit of a few hundred
// row versions, cycling through the table so the job never runs out.
const (
	fastRows  = 20_000
	fastBatch = 300
)

// An idle primary (no session but the job's and throttled's own), the
// canary on, one job whose max_rate is fastRate and whose controller
// ceiling is the same (MaxBudget, as exec sets it; the initial budget is
// left to its default). Within 15 s of the job's start its allocation
// and the batches it actually commits reach 0.9 of max_rate, and they
// stay there for the next 15 s. Before, the job started at a tenth of
// max_rate and grew by 25 % every 3 s (31 s to reach it), and one canary
// reading stretched by the job's own commit was an emergency cut of 75 %.
func TestIdlePrimaryReachesMaxRate(t *testing.T) {
	c := pgtest.Cluster(t)
	r := startFastJob(t, c, "fast-idle", throttle.Config{MaxBudget: fastRate})
	want := 0.9 * fastRate
	reach := 15*time.Second - time.Since(r.start)
	pgtest.Eventually(t, reach, func() error {
		alloc, rate := r.observe()
		if alloc < want || rate < want {
			return fmt.Errorf("%.1fs after the start: allocated %.2f/s, committing %.2f batches/s over %s; want both at least %.2f/s (0.9 of max_rate %v)",
				time.Since(r.start).Seconds(), alloc, rate, fastWindow, want, fastRate)
		}
		return nil
	})
	reached := time.Since(r.start)
	before := r.batches()
	t.Logf("at 0.9 of max_rate %.1fs after the start", reached.Seconds())
	hold := 15 * time.Second
	pgtest.Steady(t, hold, func() error {
		alloc, rate := r.observe()
		// The allocation is the controller's: it must not move. The
		// committed rate over a few seconds moves with the machine (a
		// batch slowed by a neighbour costs the token it waited past), so
		// each window may dip to 0.8; the whole hold's rate is held to
		// 0.9 below.
		if alloc < want || rate < 0.8*fastRate {
			return fmt.Errorf("%.1fs after the start: allocated %.2f/s, committing %.2f batches/s over %s; want it held at 0.9 of max_rate %v (%s)",
				time.Since(r.start).Seconds(), alloc, rate, fastWindow, fastRate, r.why())
		}
		return nil
	})
	if got := float64(r.batches()-before) / hold.Seconds(); got < want {
		t.Errorf("%.2f batches/s over the %s after reaching max_rate; want at least %.2f", got, hold, want)
	}
	r.logOthers()
}

// A light foreground (a session committing a small transaction 20 times
// a second) gives the canary something to protect; the job runs at a
// steady budget B0. Then one canary probe is made slow while the job is
// at work, as when the canary's commit queues behind the job's: one of
// the job's batches runs long (1.2 s, in pg_sleep), and meanwhile a
// session takes an ACCESS EXCLUSIVE lock on the canary's table and holds
// it for 400 ms once the canary's next probe waits behind it. The canary
// is sequential, so exactly one probe is slow, and it commits while the
// job's batch is still at work (a probe that saw no job at work would
// only move the baseline). In the 10 s after, no decision cuts the
// budget under (1 - MaxCut) of B0: a single reading, however high, is not
// evidence of an emergency. Before, it was an emergency cut of 75 %.
//
// The rule's target is 1.5, not the default 1.1: under make test the
// other packages' tests share the 2 cores, and the job's own contention
// with them stretched the canary by 1.1-1.3 for seconds, which is a cut
// the test is not about. The slow probe alone, as a mean of forty, read
// 10-20 times the baseline before: over any target.
func TestOneSlowCanaryProbeIsNotAnEmergency(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	startForeground(t, c, 20)
	rule := throttle.DefaultForegroundLatencyRule
	rule.Target = 1.5
	r := startFastJob(t, c, "fast-probe", throttle.Config{MaxBudget: fastRate, InitialBudget: fastRate,
		Rules: map[signals.Name]throttle.Rule{signals.ForegroundLatency: rule}})
	b0 := r.steadyBudget(45 * time.Second)
	floor := (1 - 0.5) * b0 // MaxCut's default: the deepest ordinary step
	t.Logf("steady at %.3g/s (%s); canary's mean latency %.2f ms", b0, r.why(), 1e3*r.latencyMean())

	// One of the job's batches runs long, so that the job is at work when
	// the slow probe commits.
	watcher := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r.slowNext.Store(int64(1200 * time.Millisecond))
	pgtest.Eventually(t, 5*time.Second, func() error {
		var n int
		if err := watcher.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND wait_event = 'PgSleep'`, jobs.AppName(r.job.Status().Job)).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d of the job's sessions in its long batch; want one", n)
		}
		return nil
	})
	// One slow probe: lock the canary's table, wait until the canary
	// queues behind the lock, then hold it 400 ms more (in the server,
	// pg_sleep) and commit.
	locker := fastConnect(t, c, "test_lock_canary")
	tx, err := locker.Begin(qctx)
	if err != nil {
		t.Fatal(err)
	}
	injected := time.Now()
	if _, err := tx.Exec(qctx, "LOCK TABLE "+signals.CanaryTable+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var waitedFrom time.Time
	var atWait signals.ServerStats
	pgtest.Eventually(t, 3*time.Second, func() error {
		var n int
		if err := watcher.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Lock'`, signals.CanaryAppName).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d canary sessions waiting on the lock; want its probe queued behind it", n)
		}
		waitedFrom, atWait = time.Now(), r.canaryStats()
		return nil
	})
	if _, err := tx.Exec(qctx, "SELECT pg_sleep(0.4)"); err != nil {
		t.Fatal(err)
	}
	// The canary's round was stuck all along: the sampler counted no
	// round since it queued.
	if st := r.canaryStats(); st.Ticks != atWait.Ticks {
		t.Fatalf("the canary sampled %d rounds while its probe was to wait behind the lock; want it stuck in one", st.Ticks-atWait.Ticks)
	}
	if err := tx.Commit(qctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	t.Logf("the canary's probe waited behind the lock for at least %.0f ms (lock held %.0f ms)",
		1e3*released.Sub(waitedFrom).Seconds(), 1e3*released.Sub(injected).Seconds())
	pgtest.Eventually(t, 5*time.Second, func() error {
		if r.slowEnded.Load() == 0 {
			return fmt.Errorf("the job's long batch has not ended")
		}
		return nil
	})
	if end := time.Unix(0, r.slowEnded.Load()); !end.After(released.Add(50 * time.Millisecond)) {
		t.Fatalf("the job's long batch ended %s before the lock was released: the slow probe may not have seen the job at work", released.Sub(end))
	}

	// Every decision of the 10 s after.
	lowest, lowestAt := b0, throttle.Decision{}
	latencyPeak, ratioPeak := 0.0, 0.0
	pgtest.Steady(t, 10*time.Second, func() error {
		latencyPeak = max(latencyPeak, r.latencyMean())
		if s, ok := r.tc.Snapshot().Get(signals.ForegroundLatency, nil); ok && s.Err == nil {
			ratioPeak = max(ratioPeak, s.Raw)
		}
		r.observe()
		for _, d := range r.decisionsSince(injected) {
			if d.Budget < lowest {
				lowest, lowestAt = d.Budget, d
			}
			if d.Budget < floor*(1-1e-9) {
				return fmt.Errorf("%.1fs after the slow probe: budget %.3g/s, under %.3g/s, half the %.3g/s before it: %s (%s, %s)",
					d.At.Sub(released).Seconds(), d.Budget, floor, b0, d.Mode, d.Code, d.Reason)
			}
		}
		return nil
	})
	// The slow probe was a reading, not a failure (which a required rule
	// would take as unknown), and the canary went on sampling.
	if st := r.canaryStats(); st.Failures != atWait.Failures || st.Ticks < atWait.Ticks+100 {
		t.Errorf("the canary failed %d rounds and sampled %d since its probe queued behind the lock; want none failed and about 200",
			st.Failures-atWait.Failures, st.Ticks-atWait.Ticks)
	}
	t.Logf("canary's mean latency peaked at %.2f ms, foreground_latency's raw ratio at %.2f; lowest budget %.3g/s of %.3g/s (%s)",
		1e3*latencyPeak, ratioPeak, lowest, b0, lowestAt.Reason)
}

// The job runs at a steady budget B0; a real CPU surge on the primary
// (three sessions spinning on CPU, on two cores) lasts until
// primary_load, smoothed, is over its target and the budget is cut under
// 0.8 of B0; then the surge ends.
// Within 15 s of its end, on a primary healthy again, the budget is back
// to at least 0.8 of B0. Before, the cut budget became the breach's
// memory, growth stopped under 0.9 of it, and probing past it waited a
// minute of calm.
//
// primary_load's critical level is raised out of the surge's reach: a
// critical pause waits out its quiet period (30 s) by design, and this
// test is about a cut.
func TestBudgetRecoversAfterCPUSurge(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	load := throttle.DefaultRules()[signals.PrimaryLoad]
	load.Critical = 4
	r := startFastJob(t, c, "fast-surge", throttle.Config{MaxBudget: fastRate, InitialBudget: fastRate,
		Rules: map[signals.Name]throttle.Rule{signals.PrimaryLoad: load}})
	b0 := r.steadyBudget(45 * time.Second)
	t.Logf("steady at %.3g/s (%s)", b0, r.why())

	surge, err := c.CPULoad(ctx, 3, time.Minute, "test_surge")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := surge.Stop(); err != nil {
				t.Errorf("surge: %v", err)
			}
		}
	}
	defer stop()
	// The surge lasts until primary_load, smoothed, is over its target
	// (a surge of seconds, not one sample's blip) and the budget has been
	// cut under 0.8 of B0.
	surged := time.Now()
	peak, peakRaw := 0.0, 0.0
	pgtest.Eventually(t, 30*time.Second, func() error {
		r.observe()
		if s, ok := r.tc.Snapshot().Get(signals.PrimaryLoad, nil); ok && s.Err == nil {
			peak, peakRaw = max(peak, s.Value), max(peakRaw, s.Raw)
		}
		d := r.tc.Decision()
		if peak <= load.Target || !(d.Budget < 0.8*b0) || !d.At.After(surged) {
			return fmt.Errorf("primary_load at most %.2f smoothed, %.2f raw (target %v), budget %.3g/s (%s); want it over target and the budget cut under %.3g/s",
				peak, peakRaw, load.Target, d.Budget, d.Reason, 0.8*b0)
		}
		return nil
	})
	cut := r.tc.Decision()
	t.Logf("%.1fs into the surge primary_load read %.2f smoothed (%.2f raw) and the budget is %.3g/s: %s",
		time.Since(surged).Seconds(), peak, peakRaw, cut.Budget, cut.Reason)
	stop()
	watcher := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'test_surge' AND state = 'active'").Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d surge sessions still active", n)
		}
		return nil
	})
	ended := time.Now()
	lowest := cut.Budget
	pgtest.Eventually(t, 15*time.Second, func() error {
		r.observe()
		d := r.tc.Decision()
		for _, x := range r.decisionsSince(surged) {
			lowest = min(lowest, x.Budget)
		}
		if d.Budget < 0.8*b0 || !d.At.After(ended) {
			return fmt.Errorf("%.1fs after the surge ended: budget %.3g/s (lowest %.3g/s); want at least %.3g/s, 0.8 of the %.3g/s before it: %s",
				time.Since(ended).Seconds(), d.Budget, lowest, 0.8*b0, b0, d.Reason)
		}
		return nil
	})
	t.Logf("back to %.3g/s %.1fs after the surge ended (lowest %.3g/s)", r.tc.Decision().Budget, time.Since(ended).Seconds(), lowest)
}

// fastWindow is how far back a job's committed batch rate is measured.
const fastWindow = 3 * time.Second

// fastRig is one job run by a Client of its own against the pair, with
// the canary on, as a user's program would run it.
type fastRig struct {
	t     *testing.T
	c     *pgcluster.Cluster
	tc    *throttled.Client
	job   *jobs.Job
	start time.Time

	mu        sync.Mutex
	decisions []throttle.Decision

	// slowNext, when set, makes the job's next batch run that much
	// longer (in pg_sleep); slowEnded is when that batch ended (Unix ns).
	slowNext, slowEnded atomic.Int64

	// history of the job's committed batches, for its rate.
	history []fastPoint
	logged  time.Time
}

type fastPoint struct {
	at      time.Time
	batches int64
}

// startFastJob migrates throttled's schema (the canary's table), seeds
// the job's table, opens a Client on the primary with ctl and starts a
// job of fastRate batches per second at most, each updating fastBatch
// rows. Everything ends with the test.
func startFastJob(t *testing.T, c *pgcluster.Cluster, name string, ctl throttle.Config) *fastRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The test's own connections close before the job starts: on an idle
	// primary no session but the job's and throttled's is left.
	table := pgx.Identifier{"fast_" + strings.ReplaceAll(name, "-", "_")}.Sanitize()
	fastAdmin(t, c, func(admin *pgx.Conn) error {
		if _, err := schema.Migrate(ctx, admin); err != nil {
			return err
		}
		for _, q := range []string{
			"DROP TABLE IF EXISTS " + table,
			"CREATE TABLE " + table + " (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text NOT NULL)",
			fmt.Sprintf("INSERT INTO %s (id, pad) SELECT g, repeat('x', 100) FROM generate_series(1, %d) g", table, fastRows),
			"VACUUM ANALYZE " + table,
		} {
			if _, err := admin.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	t.Cleanup(func() {
		fastAdmin(t, c, func(admin *pgx.Conn) error {
			_, err := admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
			return err
		})
	})
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Controller: ctl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	if on, off := tc.ForegroundLatency(); !on {
		t.Fatalf("the canary is off (%s); these tests are about pacing with it on, the default", off)
	}
	r := &fastRig{t: t, c: c, tc: tc}
	decisions := tc.Decisions()
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range decisions {
			r.mu.Lock()
			r.decisions = append(r.decisions, d)
			r.mu.Unlock()
		}
	})
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var next atomic.Int64
	update := "UPDATE " + table + " SET n = n + 1 WHERE id > $1 AND id <= $1 + $2"
	j, err := tc.Job(jobs.Config{Name: name, MaxRate: fastRate, InitialBatchSize: fastBatch, MinBatchSize: fastBatch, MaxBatchSize: fastBatch},
		pool, func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			from := (next.Add(1) - 1) * int64(b.Size) % fastRows
			tag, err := tx.Exec(ctx, update, from, b.Size)
			if d := time.Duration(r.slowNext.Swap(0)); d > 0 && err == nil {
				_, err = tx.Exec(ctx, "SELECT pg_sleep($1)", d.Seconds())
				r.slowEnded.Store(time.Now().UnixNano())
			}
			return jobs.Result{Rows: tag.RowsAffected()}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r.start = time.Now()
	go func() { done <- j.Run(runCtx) }()
	r.job = j
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && runCtx.Err() == nil {
			t.Errorf("job %s: %v", name, err)
		}
		tc.Close()
		wg.Wait()
	})
	return r
}

// observe records the job's committed batches, logs the job once a
// second, and returns its allocated rate and the batches per second it
// committed over the last fastWindow (0 until it has run that long).
func (r *fastRig) observe() (alloc, rate float64) {
	now := time.Now()
	st := r.job.Status()
	r.history = append(r.history, fastPoint{now, st.Batches})
	// The newest point at least fastWindow old.
	i := -1
	for k, p := range r.history {
		if now.Sub(p.at) >= fastWindow {
			i = k
		}
	}
	if i >= 0 {
		p := r.history[i]
		rate = float64(st.Batches-p.batches) / now.Sub(p.at).Seconds()
		r.history = r.history[i:]
	}
	if now.Sub(r.logged) >= time.Second {
		r.logged = now
		d := r.tc.Decision()
		r.t.Logf("%5.1fs  allocated %5.2f/s  committed %5.2f batches/s (%s)  budget %6.3g/s  %-9s %-14s %s",
			now.Sub(r.start).Seconds(), st.Rate, rate, fastWindow, d.Budget, d.Mode, d.Code, d.Reason)
	}
	return st.Rate, rate
}

// batches is how many batches the job has committed.
func (r *fastRig) batches() int64 { return r.job.Status().Batches }

// why is the latest decision, in words.
func (r *fastRig) why() string {
	d := r.tc.Decision()
	return fmt.Sprintf("%s, %s: %s", d.Mode, d.Code, d.Reason)
}

// decisionsSince returns the decisions made after t.
func (r *fastRig) decisionsSince(t time.Time) []throttle.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []throttle.Decision
	for _, d := range r.decisions {
		if d.At.After(t) {
			out = append(out, d)
		}
	}
	return out
}

// steadyBudget waits until the job runs, using its budget, and the last
// five decisions (five seconds) neither cut nor moved the budget by more
// than 10 %, and returns the budget.
func (r *fastRig) steadyBudget(within time.Duration) float64 {
	r.t.Helper()
	var b0 float64
	pgtest.Eventually(r.t, within, func() error {
		_, rate := r.observe()
		ds := r.decisionsSince(r.start)
		if len(ds) < 5 {
			return fmt.Errorf("%d decisions", len(ds))
		}
		ds = ds[len(ds)-5:]
		lo, hi := ds[0].Budget, ds[0].Budget
		for _, d := range ds {
			lo, hi = min(lo, d.Budget), max(hi, d.Budget)
			if d.Code == status.CodeCut || d.Budget <= 0 {
				return fmt.Errorf("budget %.3g/s (%s, %s: %s); want the job running at a steady budget", d.Budget, d.Mode, d.Code, d.Reason)
			}
		}
		if hi > 1.1*lo {
			return fmt.Errorf("budget between %.3g/s and %.3g/s over the last 5 decisions; want it steady", lo, hi)
		}
		if rate < 0.8*hi {
			return fmt.Errorf("the job commits %.2f batches/s of a budget of %.3g/s; want it using it", rate, hi)
		}
		b0 = ds[len(ds)-1].Budget
		return nil
	})
	return b0
}

// canaryStats is how the canary's sampling has gone.
func (r *fastRig) canaryStats() signals.ServerStats {
	for _, st := range r.tc.SamplerStats() {
		if st.Server == "canary" {
			return st
		}
	}
	r.t.Fatal("no canary among the sampler's servers")
	return signals.ServerStats{}
}

// latencyMean is the canary's mean latency over its recent probes, in
// seconds (foreground_latency_seconds), 0 while unknown.
func (r *fastRig) latencyMean() float64 {
	s, ok := r.tc.Snapshot().Get(signals.ForegroundLatencySeconds, nil)
	if !ok || s.Err != nil {
		return 0
	}
	return s.Value
}

// logOthers logs the client sessions on the primary that are neither the
// job's nor throttled's: none at work, on an idle primary.
func (r *fastRig) logOthers() {
	var others []string
	fastAdmin(r.t, r.c, func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), `SELECT coalesce(array_agg(coalesce(nullif(application_name, ''), '(none)') || ' ' || state), '{}')
			FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
			AND NOT starts_with(application_name, 'throttled')`).Scan(&others)
	})
	r.t.Logf("other client sessions on the primary (the job's pool between batches among them): %v", others)
}

// fastAdmin runs f on an admin connection to the primary, closed after.
func fastAdmin(t *testing.T, c *pgcluster.Cluster, f func(*pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := f(conn); err != nil {
		t.Fatal(err)
	}
}

// fastConnect opens an admin connection to the primary with
// application_name app, closed when the test ends.
func fastConnect(t *testing.T, c *pgcluster.Cluster, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// startForeground runs a light foreground until the test ends: a session
// (application_name test_foreground) committing one small transaction
// perSecond times a second.
func startForeground(t *testing.T, c *pgcluster.Cluster, perSecond int) {
	t.Helper()
	fastAdmin(t, c, func(admin *pgx.Conn) error {
		for _, q := range []string{
			"DROP TABLE IF EXISTS fast_foreground",
			"CREATE TABLE fast_foreground (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, at timestamptz)",
			"INSERT INTO fast_foreground (id) SELECT g FROM generate_series(1, 100) g",
		} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	conn := fastConnect(t, c, "test_foreground")
	runCtx, stop := context.WithCancel(context.Background())
	var commits, failures atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			qctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
			_, err := conn.Exec(qctx, "UPDATE fast_foreground SET n = n + 1, at = now() WHERE id = $1", 1+i%100)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					return
				}
				failures.Add(1)
				continue
			}
			commits.Add(1)
		}
	})
	started := time.Now()
	t.Cleanup(func() {
		stop()
		wg.Wait()
		rate := float64(commits.Load()) / time.Since(started).Seconds()
		t.Logf("foreground: %d commits (%.1f/s), %d failed", commits.Load(), rate, failures.Load())
		if rate < 0.75*float64(perSecond) {
			t.Errorf("the foreground committed %.1f transactions/s; want about %d: the canary had less to protect than the test says", rate, perSecond)
		}
		fastAdmin(t, c, func(admin *pgx.Conn) error {
			_, err := admin.Exec(context.Background(), "DROP TABLE IF EXISTS fast_foreground")
			return err
		})
	})
}
