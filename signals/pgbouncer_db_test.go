package signals

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// startPgBouncer starts a throwaway PgBouncer in front of c's primary,
// stopped when the test ends (after the test's own clients, which
// register their cleanups later).
func startPgBouncer(t *testing.T, c *pgcluster.Cluster) *pgcluster.PgBouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := c.StartPgBouncer(ctx, pgcluster.PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// bouncerPoller is newPoller with b's admin console, as the monitoring
// role (in stats_users), and a half-second timeout.
func bouncerPoller(t *testing.T, c *pgcluster.Cluster, b *pgcluster.PgBouncer) *Poller {
	t.Helper()
	return newPoller(t, c, func(cfg *Config) {
		cfg.PgBouncerDSN = b.AdminDSN(pgcluster.RoleMonitor)
		cfg.Timeout = 500 * time.Millisecond
	})
}

// plainPool is the pool the tests' clients use.
const plainPool = pgcluster.PgBouncerDatabase + "/" + pgcluster.RolePlain

// pgbouncerValues ticks once and returns every PgBouncer series' value by
// Key, or the first failed one's error.
func pgbouncerValues(t *testing.T, p *Poller) (map[string]float64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Tick(ctx)
	out := map[string]float64{}
	for _, s := range p.Snapshot().Samples {
		if !strings.HasPrefix(string(s.Name), "pgbouncer_") {
			continue
		}
		if s.Err != nil {
			return nil, fmt.Errorf("%s: %w", s.Key(), s.Err)
		}
		out[s.Key()] = s.Value
	}
	return out, nil
}

// poolKey is the Key of signal n's series for pool.
func poolKey(n Name, pool string) string {
	return Sample{Name: n, Labels: map[string]string{LabelPool: pool}}.Key()
}

// waitPgBouncer polls until check accepts the PgBouncer values of a fresh
// tick.
func waitPgBouncer(t *testing.T, p *Poller, what string, check func(v map[string]float64) bool) {
	t.Helper()
	pgtest.Eventually(t, 15*time.Second, func() error {
		v, err := pgbouncerValues(t, p)
		if err != nil {
			return err
		}
		if !check(v) {
			return fmt.Errorf("want %s; got %v", what, v)
		}
		return nil
	})
}

// holdPool opens n clients through b, each in an open transaction: in
// transaction pooling each holds a server connection until it ends. The
// returned release rolls them back.
func holdPool(t *testing.T, b *pgcluster.PgBouncer, n int) (release func()) {
	t.Helper()
	ctx := context.Background()
	var txs []pgx.Tx
	for i := range n {
		conn, err := b.Connect(ctx, pgcluster.RolePlain)
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		tx, err := conn.Begin(qctx)
		if err == nil {
			_, err = tx.Exec(qctx, "SELECT 1") // the transaction now has its server
		}
		cancel()
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		txs = append(txs, tx)
	}
	return func() {
		for _, tx := range txs {
			_ = tx.Rollback(context.Background())
		}
	}
}

// waitForServer starts n clients through b that each run one statement,
// which waits in PgBouncer while the pool is full. The returned done
// reports, within timeout, whether every one finished without error.
func waitForServer(t *testing.T, b *pgcluster.PgBouncer, n int) (done func(timeout time.Duration) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	results := make(chan error, n)
	for i := range n {
		conn, err := b.Connect(ctx, pgcluster.RolePlain)
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		go func() {
			_, err := conn.Exec(ctx, "SELECT 1")
			results <- err
		}()
	}
	return func(timeout time.Duration) error {
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		for i := range n {
			select {
			case err := <-results:
				if err != nil {
					return fmt.Errorf("waiter: %w", err)
				}
			case <-deadline.C:
				return fmt.Errorf("%d of %d waiters still waiting after %s", n-i, n, timeout)
			}
		}
		return nil
	}
}

// A pool held full by open transactions makes the next clients wait in
// PgBouncer: waiting clients and their wait rise, the pool reads fully
// used; released, all three return to 0, and the idle server connections
// the pool keeps do not count as used.
func TestPgBouncerFullPoolMakesClientsWait(t *testing.T) {
	c := pgtest.Cluster(t)
	b := startPgBouncer(t, c)
	p := bouncerPoller(t, c, b)

	// Before any client, there is no pool but the admin console's (the
	// sampler's own, left out), and nothing waits.
	v, err := pgbouncerValues(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 3 || v[string(PgBouncerWaitingClientsMax)] != 0 || v[string(PgBouncerPoolUsedFractionMax)] != 0 {
		t.Fatalf("before any client: %v; want only the maxima, at 0", v)
	}

	release := holdPool(t, b, b.PoolSize)
	const waiters = 2
	done := waitForServer(t, b, waiters)
	waitPgBouncer(t, p, fmt.Sprintf("%d waiting, a wait over 0, the pool fully used", waiters), func(v map[string]float64) bool {
		return v[poolKey(PgBouncerWaitingClients, plainPool)] == waiters && v[string(PgBouncerWaitingClientsMax)] == waiters &&
			v[poolKey(PgBouncerMaxWaitSeconds, plainPool)] > 0 && v[string(PgBouncerMaxWaitSecondsMax)] > 0 &&
			v[poolKey(PgBouncerPoolUsedFraction, plainPool)] == 1 && v[string(PgBouncerPoolUsedFractionMax)] == 1 &&
			len(v) == 6 // the maxima and this pool's: the admin console's own pool is left out
	})

	release()
	if err := done(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitPgBouncer(t, p, "nothing waiting, no wait, nothing used", func(v map[string]float64) bool {
		for _, n := range []Name{PgBouncerWaitingClientsMax, PgBouncerMaxWaitSecondsMax, PgBouncerPoolUsedFractionMax} {
			if x, ok := v[string(n)]; !ok || x != 0 {
				return false
			}
		}
		return len(v) == 6 && v[poolKey(PgBouncerWaitingClients, plainPool)] == 0 && v[poolKey(PgBouncerMaxWaitSeconds, plainPool)] == 0 &&
			v[poolKey(PgBouncerPoolUsedFraction, plainPool)] == 0
	})
}

// pgbouncerErrors ticks once and returns every PgBouncer sample, failing
// the test if one has a value or no error; it also returns how long the
// tick took.
func pgbouncerErrors(t *testing.T, p *Poller) ([]Sample, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	p.Tick(ctx)
	took := time.Since(start)
	var out []Sample
	for _, s := range p.Snapshot().Samples {
		if strings.HasPrefix(string(s.Name), "pgbouncer_") {
			if s.Err == nil || s.Value != 0 || s.Raw != 0 {
				t.Errorf("%s = %v, %v; want an error and no value", s.Key(), s.Value, s.Err)
			}
			out = append(out, s)
		}
	}
	return out, took
}

// A PgBouncer that dies fails every PgBouncer signal at the next tick,
// its pool's included, well within the timeout; the primary's signals are
// unaffected.
func TestPgBouncerStoppedFailsClosed(t *testing.T) {
	c := pgtest.Cluster(t)
	b := startPgBouncer(t, c)
	p := bouncerPoller(t, c, b)
	client, err := b.Connect(context.Background(), pgcluster.RolePlain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	client.Close(context.Background())
	waitPgBouncer(t, p, "the pool sampled", func(v map[string]float64) bool {
		_, ok := v[poolKey(PgBouncerPoolUsedFraction, plainPool)]
		return ok
	})

	b.Stop()
	failed, took := pgbouncerErrors(t, p)
	if len(failed) != 6 {
		t.Fatalf("%d PgBouncer samples after the stop; want 6 (3 of the pool, 3 maxima): %v", len(failed), failed)
	}
	if took > time.Second {
		t.Errorf("the tick took %s with a 500ms timeout", took)
	}
	if s := get(t, p.Snapshot(), PrimaryLoad, ""); s.Err != nil {
		t.Errorf("primary_load failed with PgBouncer: %v", s.Err)
	}
	// Inside the backoff, the next tick does not hammer it.
	failed, _ = pgbouncerErrors(t, p)
	if s := failed[len(failed)-1]; !errors.Is(s.Err, ErrUnreachable) {
		t.Errorf("%s: %v; want ErrUnreachable", s.Key(), s.Err)
	}
}

// A hung PgBouncer (it accepts TCP connections but answers nothing)
// fails the signals with ErrTimeout within the timeout; resumed, they come
// back on a new connection.
func TestPgBouncerHungTimesOutAndRecovers(t *testing.T) {
	c := pgtest.Cluster(t)
	b := startPgBouncer(t, c)
	p := bouncerPoller(t, c, b)
	if _, err := pgbouncerValues(t, p); err != nil {
		t.Fatal(err)
	}
	if err := b.Hang(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Resume)
	failed, took := pgbouncerErrors(t, p)
	if len(failed) == 0 || !errors.Is(failed[0].Err, ErrTimeout) {
		t.Fatalf("samples of a hung PgBouncer %v; want ErrTimeout", failed)
	}
	if took < 400*time.Millisecond || took > 2*time.Second {
		t.Errorf("the tick took %s; want about the 500ms timeout", took)
	}
	b.Resume()
	waitPgBouncer(t, p, "values again", func(v map[string]float64) bool { return len(v) == 3 })
}

// The PgBouncer DSN must reach the admin console as a role allowed to
// read it; anything else fails Connect with what to fix, and no
// password.
func TestPgBouncerWrongTargetsFailAtConnect(t *testing.T) {
	c := pgtest.Cluster(t)
	b := startPgBouncer(t, c)
	for _, tc := range []struct {
		name, dsn string
		want      error
		says      string
		secret    string
	}{
		{"the primary itself", c.Primary.DSN(pgcluster.RoleMonitor), ErrWrongServer, "dbname=pgbouncer", c.Password(pgcluster.RoleMonitor)},
		{"a pooled database", b.DSN(pgcluster.RoleMonitor), ErrWrongServer, "dbname=pgbouncer", c.Password(pgcluster.RoleMonitor)},
		{"a role not in stats_users", b.AdminDSN(pgcluster.RolePlain), ErrMissingGrant, "stats_users", c.Password(pgcluster.RolePlain)},
		{"a closed port", "postgres://throttled_monitor:secret@127.0.0.1:1/pgbouncer?sslmode=disable", ErrUnreachable, "connect to pgbouncer 127.0.0.1:1", "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, PgBouncerDSN: tc.dsn, Timeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = p.Connect(ctx)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Connect: %v; want %v saying %q", err, tc.want, tc.says)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error contains the password: %v", err)
			}
			if s := get(t, snapshotAfterTick(p), PgBouncerPoolUsedFractionMax, ""); s.Err == nil {
				t.Fatalf("%s = %v after a failed Connect; want an error", s.Key(), s.Value)
			}
		})
	}
}

func snapshotAfterTick(p *Poller) Snapshot {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Tick(ctx)
	return p.Snapshot()
}
