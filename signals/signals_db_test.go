package signals

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newPoller returns a poller on the shared pair as the pg_monitor role,
// connected, and closed when the test ends.
func newPoller(t *testing.T, c *pgcluster.Cluster, mod func(*Config)) *Poller {
	t.Helper()
	cfg := Config{
		PrimaryDSN:  c.Primary.DSN(pgcluster.RoleMonitor),
		ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)},
		Cores:       2,
		Smoothing:   time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// tick samples once and returns the sample of name (with the replica
// label when replica is not empty), failing if it is absent.
func tick(t *testing.T, p *Poller, name Name, replica string) Sample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Tick(ctx)
	return get(t, p.Snapshot(), name, replica)
}

func get(t *testing.T, snap Snapshot, name Name, replica string) Sample {
	t.Helper()
	var labels map[string]string
	if replica != "" {
		labels = replicaLabels(replica)
	}
	s, ok := snap.Get(name, labels)
	if !ok {
		var keys []string
		for _, x := range snap.Samples {
			keys = append(keys, x.Key())
		}
		t.Fatalf("no sample %s %v in snapshot %v", name, labels, keys)
	}
	return s
}

// value is tick's sample value, or an error naming why it is not usable.
func value(t *testing.T, p *Poller, name Name, replica string, smoothed bool) (float64, error) {
	s := tick(t, p, name, replica)
	if s.Err != nil {
		return 0, s.Err
	}
	if smoothed {
		return s.Value, nil
	}
	return s.Raw, nil
}

// waitValue polls until the sample of name (raw, or smoothed) compares
// to w by op, or fails the test after timeout.
func waitValue(t *testing.T, p *Poller, timeout time.Duration, name Name, replica string, smoothed bool, op string, w float64) {
	t.Helper()
	pgtest.Eventually(t, timeout, func() error {
		v, err := value(t, p, name, replica, smoothed)
		if err != nil {
			return err
		}
		return want(name, v, w, op)
	})
}

func want(name Name, got, want float64, cmp string) error {
	ok := map[string]bool{
		"==": got == want,
		">=": got >= want,
		"<=": got <= want,
	}[cmp]
	if !ok {
		return errors.New(string(name) + ": got " + ftoa(got) + ", want " + cmp + " " + ftoa(want))
	}
	return nil
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestPrimaryLoadCountsOnCPUSessionsPerCore(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	if v, err := value(t, p, PrimaryLoad, "", false); err != nil || v != 0 {
		t.Fatalf("idle primary_load raw = %v, %v; want 0", v, err)
	}
	load, err := c.CPULoad(context.Background(), 2, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	// Two busy sessions on two configured cores: exactly 1.0 raw, and the
	// smoothed value climbs to it.
	waitValue(t, p, 10*time.Second, PrimaryLoad, "", false, "==", 1.0)
	pgtest.Eventually(t, 15*time.Second, func() error {
		v, err := value(t, p, PrimaryLoad, "", true)
		if err != nil {
			return err
		}
		return errors.Join(want(PrimaryLoad, v, 0.9, ">="), want(PrimaryLoad, v, 1.0, "<="))
	})
	s := get(t, p.Snapshot(), PrimaryLoad, "")
	if s.Unit != UnitPerCore {
		t.Errorf("unit = %q", s.Unit)
	}
	if err := load.Stop(); err != nil {
		t.Fatal(err)
	}
	waitValue(t, p, 10*time.Second, PrimaryLoad, "", false, "==", 0)
}

func TestLockWaitsRaiseLockWaitNotLoad(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	waits, err := c.LockWaits(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer waits.Stop()
	for range 4 {
		s := tick(t, p, PrimaryLoad, "")
		lock := get(t, p.Snapshot(), PrimaryLockWait, "")
		if s.Err != nil || lock.Err != nil {
			t.Fatal(s.Err, lock.Err)
		}
		if s.Raw != 0 {
			t.Fatalf("primary_load raw = %v with 3 lock-blocked sessions; want 0", s.Raw)
		}
		if lock.Raw != 3 {
			t.Fatalf("primary_lock_wait raw = %v; want 3", lock.Raw)
		}
	}
	// pg_sleep waits on a timeout (wait event PgSleep): not load either.
	sleeper := pgtest.Connect(t, c.Primary, pgcluster.RolePlain)
	sctx, stopSleep := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sleeper.Exec(sctx, "SELECT pg_sleep(60)") })
	defer func() { stopSleep(); wg.Wait() }()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("pg_sleep sessions: %d, %v", n, err)
		}
		return nil
	})
	if s := tick(t, p, PrimaryLoad, ""); s.Err != nil || s.Raw != 0 {
		t.Fatalf("primary_load raw = %v, %v with a pg_sleep session and 3 lock waits; want 0", s.Raw, s.Err)
	}
	stopSleep()
	wg.Wait()
	if err := waits.Stop(); err != nil {
		t.Fatal(err)
	}
	waitValue(t, p, 10*time.Second, PrimaryLockWait, "", false, "==", 0)
}

func TestJobSessionsCountThrottledApplicationNames(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	jobs, err := c.CPULoad(context.Background(), 1, time.Minute, JobAppPrefix+"purge")
	if err != nil {
		t.Fatal(err)
	}
	defer jobs.Stop()
	other, err := c.CPULoad(context.Background(), 1, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	// A busy session is idle between its statements for as long as its
	// client takes to send the next, and on a loaded machine one reading
	// can catch it there. So every reading is at most the truth, and one
	// within the deadline is the truth.
	pgtest.Eventually(t, 10*time.Second, func() error {
		s := tick(t, p, PrimaryJobSessions, "")
		load := get(t, p.Snapshot(), PrimaryLoad, "")
		if s.Err != nil || s.Raw > 1 {
			t.Fatalf("primary_job_sessions = %v, %v; want 1 of the 2 busy sessions", s.Raw, s.Err)
		}
		if load.Raw > 1.0 {
			t.Fatalf("primary_load raw = %v; want 1.0 (2 sessions, 2 cores)", load.Raw)
		}
		if s.Raw != 1 || load.Raw != 1.0 {
			return fmt.Errorf("primary_job_sessions = %v, primary_load raw = %v; want 1 and 1.0 (2 busy sessions, 2 cores)", s.Raw, load.Raw)
		}
		return nil
	})
}

func TestConnectionHeadroomFallsOneForOneToZero(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	// The base once five rounds in a row agree: a backend an earlier
	// test's client closed may still be exiting, and read once it made
	// every later reading one over.
	var base Sample
	pgtest.Eventually(t, 30*time.Second, func() error {
		base = tick(t, p, ConnectionHeadroom, "")
		for range 4 {
			if x := tick(t, p, ConnectionHeadroom, ""); x.Err != nil || base.Err != nil || x.Raw != base.Raw {
				return fmt.Errorf("headroom read %v then %v (%v, %v): not settled", base.Raw, x.Raw, base.Err, x.Err)
			}
		}
		return nil
	})
	usable := float64(pgcluster.MaxConnections - pgcluster.SuperuserReservedConnections)
	if base.Raw <= 0 || base.Raw >= usable {
		t.Fatalf("idle headroom = %v; want in (0, %v)", base.Raw, usable)
	}
	var opened []*pgcluster.Sessions
	defer func() {
		for _, s := range opened {
			s.Stop()
		}
	}()
	for i := 1; i <= 5; i++ {
		s, err := c.OpenConnections(context.Background(), 1)
		if err != nil || s.Len() != 1 {
			t.Fatalf("open connection %d: %v", i, err)
		}
		opened = append(opened, s)
		got := tick(t, p, ConnectionHeadroom, "")
		if got.Err != nil || got.Raw != base.Raw-float64(i) {
			t.Fatalf("after %d connections headroom = %v, %v; want %v", i, got.Raw, got.Err, base.Raw-float64(i))
		}
		used := get(t, p.Snapshot(), ConnectionUsedFraction, "")
		if wantUsed := (usable - got.Raw) / usable; math.Abs(used.Raw-wantUsed) > 1e-9 {
			t.Fatalf("used fraction = %v; want %v", used.Raw, wantUsed)
		}
	}
	// Exhaust: the server refuses the next plain client (53300); the
	// sampler keeps its own connection and reads 0.
	rest, err := c.OpenConnections(context.Background(), pgcluster.MaxConnections)
	if err != nil {
		t.Fatal(err)
	}
	opened = append(opened, rest)
	if float64(rest.Len()) != base.Raw-5 {
		t.Fatalf("opened %d more before 53300; want %v", rest.Len(), base.Raw-5)
	}
	got := tick(t, p, ConnectionHeadroom, "")
	if got.Err != nil || got.Raw != 0 {
		t.Fatalf("headroom at the limit = %v, %v; want 0", got.Raw, got.Err)
	}
	if used := get(t, p.Snapshot(), ConnectionUsedFraction, ""); used.Raw != 1 {
		t.Fatalf("used fraction at the limit = %v; want 1", used.Raw)
	}
}

func TestReplicaLagGrowsWhileReplayPausedAndReturnsToZero(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	waitValue(t, p, 10*time.Second, ReplicaLagBytes, pgcluster.ReplicaName, false, "==", 0)
	if err := c.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ResumeReplay(context.Background()) })
	var prev float64
	for i := range 3 {
		if err := c.WriteWAL(ctx, 256<<10); err != nil {
			t.Fatal(err)
		}
		// Lag grows with each write (the replica reports its replay
		// position every second).
		waitValue(t, p, 10*time.Second, ReplicaLagBytes, pgcluster.ReplicaName, false, ">=", prev+200<<10)
		prev = get(t, p.Snapshot(), ReplicaLagBytes, pgcluster.ReplicaName).Raw
		t.Logf("write %d: lag %v bytes", i+1, prev)
	}
	paused := get(t, p.Snapshot(), ReplicaReplayPaused, pgcluster.ReplicaName)
	if paused.Err != nil || paused.Raw != 1 {
		t.Fatalf("replica_replay_paused = %v, %v; want 1", paused.Raw, paused.Err)
	}
	// The replica receives what it cannot replay.
	waitValue(t, p, 10*time.Second, ReplicaReplayBacklogBytes, pgcluster.ReplicaName, false, ">=", 500<<10)
	if err := c.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		b, err := value(t, p, ReplicaLagBytes, pgcluster.ReplicaName, false)
		if err != nil {
			return err
		}
		s := get(t, p.Snapshot(), ReplicaLagSeconds, pgcluster.ReplicaName)
		if s.Err != nil {
			return s.Err
		}
		return want(ReplicaLagBytes, b, 0, "==")
	})
}

func TestStoppedReplicaIsMissingNotZeroLag(t *testing.T) {
	c := pgtest.Cluster(t)
	// Without a replica DSN: the slot alone makes the replica known.
	p := newPoller(t, c, func(cfg *Config) { cfg.ReplicaDSNs = nil })
	if s := tick(t, p, ReplicaLagBytes, pgcluster.ReplicaName); s.Err != nil {
		t.Fatal(s.Err)
	}
	if err := c.StopReplica(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.StartReplica(context.Background()) })
	for _, name := range []Name{ReplicaLagBytes, ReplicaLagSeconds} {
		s := tick(t, p, name, pgcluster.ReplicaName)
		var missing *ReplicaMissingError
		if !errors.As(s.Err, &missing) || missing.Replica != pgcluster.ReplicaName {
			t.Fatalf("%s of a stopped replica: value %v, err %v; want ReplicaMissingError", name, s.Value, s.Err)
		}
		if !strings.Contains(s.Err.Error(), `replica "replica1" is missing`) {
			t.Errorf("error text %q", s.Err)
		}
	}
	// The primary's own signals are unaffected.
	if s := get(t, p.Snapshot(), PrimaryLoad, ""); s.Err != nil {
		t.Fatal(s.Err)
	}
	if err := c.StartReplica(context.Background()); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		return tick(t, p, ReplicaLagBytes, pgcluster.ReplicaName).Err
	})
}

func TestHungPrimaryTimesOutAndRecovers(t *testing.T) {
	c := pgtest.Cluster(t)
	const timeout = 500 * time.Millisecond
	p := newPoller(t, c, func(cfg *Config) {
		cfg.Timeout = timeout
		cfg.Interval = 100 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	fresh := func(name Name, replica string) error {
		snap := p.Snapshot()
		var labels map[string]string
		if replica != "" {
			labels = replicaLabels(replica)
		}
		s, ok := snap.Get(name, labels)
		if !ok {
			return errors.New(string(name) + " not sampled yet")
		}
		if s.Err != nil {
			return s.Err
		}
		if snap.Stale(s) {
			return errors.New(string(name) + " is stale")
		}
		return nil
	}
	pgtest.Eventually(t, 10*time.Second, func() error { return fresh(PrimaryLoad, "") })

	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	hungAt := time.Now()
	var failedAt time.Time
	pgtest.Eventually(t, 10*time.Second, func() error {
		s := get(t, p.Snapshot(), PrimaryLoad, "")
		if !errors.Is(s.Err, ErrTimeout) {
			return fmt.Errorf("primary_load has not timed out yet: %v", s.Err)
		}
		failedAt = s.At
		return nil
	})
	// Bound: the sample in flight at the hang, plus one timed-out query.
	if d := failedAt.Sub(hungAt); d > 2*timeout+time.Second {
		t.Errorf("first timed-out sample %s after the hang; want within about %s", d, timeout)
	}
	// The replica is sampled in its own goroutine: its samples stay fresh.
	for range 3 {
		if err := fresh(ReplicaReplayPaused, pgcluster.ReplicaName); err != nil {
			t.Fatalf("replica sampling stalled with the primary: %v", err)
		}
		pgtest.Eventually(t, 5*time.Second, func() error {
			if time.Since(get(t, p.Snapshot(), ReplicaReplayPaused, pgcluster.ReplicaName).At) > 200*time.Millisecond {
				return errors.New("waiting for a new replica sample")
			}
			return nil
		})
	}
	c.ResumePrimary()
	pgtest.Eventually(t, 15*time.Second, func() error { return fresh(PrimaryLoad, "") })
}

func TestRoleWithoutPgMonitorFailsAtStart(t *testing.T) {
	c := pgtest.Cluster(t)
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RolePlain), Cores: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Connect(context.Background())
	var grant *GrantError
	if !errors.Is(err, ErrMissingGrant) || !errors.As(err, &grant) || grant.Role != pgcluster.RolePlain {
		t.Fatalf("Connect as a plain role: %v; want GrantError for %s", err, pgcluster.RolePlain)
	}
	for _, want := range []string{"pg_read_all_stats", "GRANT pg_monitor TO", pgcluster.RolePlain} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Sampling without Connect fails the same way, as error samples.
	if s := tick(t, p, PrimaryLoad, ""); !errors.Is(s.Err, ErrMissingGrant) {
		t.Fatalf("sample as plain role: %v", s.Err)
	}
}

// revokeMonitor takes pg_monitor from the sampler role on the shared pair
// and gives it back when the test ends (the next test samples as it).
func revokeMonitor(t *testing.T, c *pgcluster.Cluster) (grant func()) {
	t.Helper()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(q string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	grant = func() { exec("GRANT pg_monitor TO " + pgcluster.RoleMonitor) }
	t.Cleanup(grant)
	exec("REVOKE pg_monitor FROM " + pgcluster.RoleMonitor)
	return grant
}

// grantErrors returns nil when every sample of snap fails with a
// GrantError naming role, else what does not.
func grantErrors(snap Snapshot, role string) error {
	var errs []error
	for _, s := range snap.Samples {
		var g *GrantError
		if !errors.As(s.Err, &g) || g.Role != role {
			errs = append(errs, fmt.Errorf("%s: value %v, err %v; want a GrantError for %s", s.Key(), s.Raw, s.Err, role))
		}
	}
	return errors.Join(errs...)
}

// The grant is checked on every tick, not only at connect. Issue 10: with
// pg_monitor revoked from the sampler role mid-run, other users' sessions
// read with a NULL state and counted as idle, so a CPU-bound primary read
// primary_load 0.09, 0.03, 0.007 with no error and the sidecar said "go".
// Now every signal of the primary and of the replica fails with a
// GrantError within a tick, and recovers on the same connection once the
// grant is back.
func TestRevokedPgMonitorFailsEverySignalUntilGranted(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	load, err := c.CPULoad(context.Background(), 2, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	waitValue(t, p, 10*time.Second, PrimaryLoad, "", false, "==", 1.0)
	pgtest.Eventually(t, 10*time.Second, func() error {
		p.Tick(context.Background())
		var errs []error
		for _, s := range p.Snapshot().Samples {
			errs = append(errs, s.Err)
		}
		return errors.Join(errs...)
	})
	primaryConn, replicaConn := p.primary.srv.conn, p.replicas[0].srv.conn

	grant := revokeMonitor(t, c)
	// The primary's catalogs change at once: its very next tick fails.
	p.Tick(context.Background())
	snap := p.Snapshot()
	var primary Snapshot
	for _, s := range snap.Samples {
		if s.Name != ReplicaReplayBacklogBytes && s.Name != ReplicaReplayPaused {
			primary.Samples = append(primary.Samples, s)
		}
	}
	if err := grantErrors(primary, pgcluster.RoleMonitor); err != nil {
		t.Fatalf("the tick after the revoke:\n%v", err)
	}
	s := get(t, snap, PrimaryLoad, "")
	for _, want := range []string{"pg_read_all_stats", `GRANT pg_monitor TO "throttled_monitor"`} {
		if !strings.Contains(s.Err.Error(), want) {
			t.Errorf("error %q does not mention %q", s.Err, want)
		}
	}
	// The replica's once it has replayed the revoke.
	pgtest.Eventually(t, 10*time.Second, func() error {
		p.Tick(context.Background())
		return grantErrors(p.Snapshot(), pgcluster.RoleMonitor)
	})

	grant()
	pgtest.Eventually(t, 10*time.Second, func() error {
		p.Tick(context.Background())
		snap := p.Snapshot()
		for _, s := range snap.Samples {
			if s.Err != nil {
				return fmt.Errorf("%s: %v", s.Key(), s.Err)
			}
		}
		return want(PrimaryLoad, get(t, snap, PrimaryLoad, "").Raw, 1.0, "==")
	})
	if p.primary.srv.conn != primaryConn || p.replicas[0].srv.conn != replicaConn {
		t.Error("the sampler reconnected; a missing grant must not cost the connection")
	}
}

func TestSuperuserAndWrongServerRefused(t *testing.T) {
	c := pgtest.Cluster(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"superuser", Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleAdmin), Cores: 2}, ErrSuperuser},
		{"primary DSN at the replica", Config{PrimaryDSN: c.Replica.DSN(pgcluster.RoleMonitor), Cores: 2}, ErrWrongServer},
		{"replica DSN at the primary", Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor),
			ReplicaDSNs: []string{c.Primary.DSN(pgcluster.RoleMonitor)}, Cores: 2}, ErrWrongServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.Connect(context.Background()); !errors.Is(err, tc.want) {
				t.Fatalf("Connect: %v; want %v", err, tc.want)
			}
		})
	}
	p := newPoller(t, c, func(cfg *Config) {
		cfg.PrimaryDSN = c.Primary.DSN(pgcluster.RoleAdmin)
		cfg.AllowSuperuser = true
	})
	if s := tick(t, p, PrimaryLoad, ""); s.Err != nil {
		t.Fatalf("AllowSuperuser: %v", s.Err)
	}
}

func TestSecretsNeverReachTheLog(t *testing.T) {
	c := pgtest.Cluster(t)
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace})
	secret := c.Password(pgcluster.RoleMonitor)
	bad := strings.Replace(c.Primary.DSN(pgcluster.RoleMonitor), secret, secret+"x", 1)
	p, err := New(Config{PrimaryDSN: bad, Cores: 2, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Tick(context.Background())
	s := get(t, p.Snapshot(), PrimaryLoad, "")
	if s.Err == nil || !strings.Contains(s.Err.Error(), "password authentication failed") {
		t.Fatalf("sample with a wrong password: %v", s.Err)
	}
	// Inside the reconnect backoff, Connect reports the last failure.
	err = p.Connect(context.Background())
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("Connect during backoff: %v", err)
	}
	for what, text := range map[string]string{"log": buf.String(), "error": err.Error(), "sample error": s.Err.Error()} {
		if strings.Contains(text, secret) {
			t.Errorf("%s contains the password: %s", what, text)
		}
	}
	if !strings.Contains(buf.String(), "connect failed") {
		t.Errorf("log has no connect failure: %s", buf.String())
	}
}

func TestUnreachableServerFailsFast(t *testing.T) {
	p, err := New(Config{PrimaryDSN: "postgres://u:secret@127.0.0.1:1/db?sslmode=disable", Cores: 2, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.Connect(context.Background())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "connect to primary 127.0.0.1:1") {
		t.Fatalf("Connect to a closed port: %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error contains the password: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Connect took %s", d)
	}
	// A second sample inside the backoff does not hammer the server: it
	// fails as not connected.
	p.Tick(context.Background())
	if s := get(t, p.Snapshot(), PrimaryLoad, ""); !errors.Is(s.Err, ErrNotConnected) || !errors.Is(s.Err, ErrUnreachable) {
		t.Fatalf("sample during backoff: %v; want ErrNotConnected wrapping ErrUnreachable", s.Err)
	}
}

func BenchmarkTick(b *testing.B) {
	c := pgtest.Cluster(b)
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if err := p.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Tick(ctx)
	}
	b.ReportMetric(QueriesPerTick, "queries/tick")
	b.ReportMetric(1, "roundtrips/tick")
	if s, _ := p.Snapshot().Get(PrimaryLoad, nil); s.Err != nil {
		b.Fatal(s.Err)
	}
}

func TestStatsCountRoundsAndFailures(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	for range 3 {
		tick(t, p, PrimaryLoad, "")
	}
	st := p.Stats()
	if len(st) != 2 || st[0].Server != "primary" || st[0].Ticks != 3 || st[0].Failures != 0 || st[0].LastDuration <= 0 {
		t.Fatalf("stats %+v (primary_load: %v)", st, p.Snapshot().Samples[0].Err)
	}
	bad, err := New(Config{PrimaryDSN: "postgres://u:p@127.0.0.1:1/x?sslmode=disable", Cores: 1, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bad.Tick(context.Background())
	if st := bad.Stats(); len(st) != 1 || st[0].Failures != 1 {
		t.Fatalf("stats of an unreachable primary %+v", st)
	}
}

// At start, Connect waits for a slow server longer than a sampling tick
// would (StartTimeout, not Config.Timeout): a primary stalled for 1.5 s,
// as a loaded host's SCRAM exchange can be, still connects with a 1 s
// sampling timeout.
func TestConnectAtStartOutlastsASlowServer(t *testing.T) {
	c := pgtest.Cluster(t)
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	// The stall is the fault under test, ended by a timer: nothing waits
	// on it to synchronise.
	resume := time.AfterFunc(1500*time.Millisecond, c.ResumePrimary)
	defer resume.Stop()
	start := time.Now()
	if err := p.Connect(context.Background()); err != nil {
		t.Fatalf("Connect with the primary stalled for 1.5 s: %v", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("Connect returned after %s, before the stall ended; the test did not stall it", d)
	}
}
