package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
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
	if _, err := b.LocalHolds().Add(throttle.HoldRequest{Scope: throttle.OneJob("local-hold"), Source: throttle.SourceManual, Reason: "stop", TTL: time.Hour}); err != nil {
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
	if _, err := tc.LocalHolds().Add(throttle.HoldRequest{Scope: throttle.OneJob("unconfirmed-first"), Source: throttle.SourceManual,
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
	if st := p.Status(); st.Code != throttle.CodeUnavailable {
		t.Fatalf("status %s (%q) while the holds are unconfirmed; want unavailable", st.Code, st.Reason)
	}
	if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
		t.Fatal("the job does not report itself unavailable while the holds are unconfirmed")
	}
	c.ResumePrimary()
}

// coordinatorRole is a non-superuser coordination role made for the tests
// of its privileges: the other coordinated tests coordinate as the
// bootstrap superuser, from whom no privilege can be revoked.
const coordinatorRole = "throttled_coordinator"

// coordinationRole creates coordinatorRole with the privileges coordinated
// mode needs on the pair's throttled schema (migrated first, as the
// superuser) and returns its DSN and a superuser connection. The role and
// its grants are dropped when the test ends, after the test's clients
// have closed.
func coordinationRole(t *testing.T, c *pgcluster.Cluster) (dsn string, admin *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin = pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	password := fmt.Sprintf("coord-%d", time.Now().UnixNano())
	for _, q := range []string{
		fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF; END $$`, coordinatorRole),
		fmt.Sprintf("ALTER ROLE %s LOGIN NOSUPERUSER PASSWORD '%s'", coordinatorRole, password),
		// Open migrates: CREATE SCHEMA and TABLE IF NOT EXISTS check the
		// privilege to create before they find the objects there.
		"GRANT CREATE ON DATABASE postgres TO " + coordinatorRole,
		"GRANT USAGE, CREATE ON SCHEMA throttled TO " + coordinatorRole,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA throttled TO " + coordinatorRole,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA throttled TO " + coordinatorRole,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{"DROP OWNED BY " + coordinatorRole, "DROP ROLE " + coordinatorRole} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(c.Primary.DSN(pgcluster.RolePlain))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(coordinatorRole, password)
	return u.String(), admin
}

// A coordination role that loses write access to throttled's tables
// fails closed, and says it is a permission problem. Before, a heartbeat
// refused with SQLSTATE 42501 paused its worker "cannot reach the
// coordination database" and logged nothing; and a leader refused only on
// throttled.leader still renewed every worker's lease (the allocations
// were written by a statement of their own), so the workers ran on while
// the decision a new leader takes over from was never written. Now every
// worker pauses within the lease with a reason naming the missing GRANT,
// the log says the same, and the worker runs again once it is granted.
func TestCoordinationRoleWithoutWriteAccessPausesWorkers(t *testing.T) {
	for _, tc := range []struct {
		name, revoke, grant, table string
	}{
		{"workers", "REVOKE UPDATE ON throttled.workers FROM " + coordinatorRole,
			"GRANT UPDATE ON throttled.workers TO " + coordinatorRole, "throttled.workers"},
		{"leader", "REVOKE INSERT, UPDATE ON throttled.leader FROM " + coordinatorRole,
			"GRANT INSERT, UPDATE ON throttled.leader TO " + coordinatorRole, "throttled.leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pgtest.Cluster(t)
			dsn, admin := coordinationRole(t, c)
			var logs pgtest.Buffer
			opts := coordinated(t, c, 20)
			opts.CoordinationDSN = dsn
			opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			client, p := runningJob(t, opts, "grant-"+tc.name)
			pgtest.Eventually(t, 10*time.Second, func() error {
				if !client.Leader() {
					return errors.New("the only process does not lead yet")
				}
				return nil
			})
			exec := func(q string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := admin.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			t.Cleanup(func() { exec(tc.grant) })
			exec(tc.revoke)
			revokedAt := time.Now()
			pgtest.Eventually(t, throttled.DefaultLease+5*time.Second, func() error {
				if running(p) == nil {
					return errors.New("the worker still runs")
				}
				if _, r, _, _ := p.Explain(); !strings.Contains(r, "GRANT") {
					return fmt.Errorf("paused for %q; want the missing GRANT named", r)
				}
				return nil
			})
			if d := time.Since(revokedAt); d > throttled.DefaultLease+time.Second {
				t.Errorf("paused %s after the revoke; want within the lease (%s) and a heartbeat", d, throttled.DefaultLease)
			}
			_, reason, _, _ := p.Explain()
			for _, want := range []string{"permission", "42501", tc.table, coordinatorRole} {
				if !strings.Contains(reason, want) {
					t.Errorf("reason %q does not mention %q", reason, want)
				}
			}
			if strings.Contains(reason, "cannot reach") {
				t.Errorf("reason %q blames reachability for a permission problem", reason)
			}
			if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
				t.Error("the worker does not report itself unavailable")
			}
			if log := logs.String(); !strings.Contains(log, "GRANT") || !strings.Contains(log, tc.table) {
				t.Errorf("the log does not name the grant on %s:\n%s", tc.table, log)
			}
			exec(tc.grant)
			pgtest.Eventually(t, 15*time.Second, func() error { return running(p) })
		})
	}
}

// A process that defers leadership (throttled exec, which cannot page)
// never takes it from one that publishes, though it started first; once
// the leader is gone it takes over after DeferLeadership.
func TestADeferringProcessLeadsOnlyWhenNoneElseDoes(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	deferring := coordinated(t, c, 5)
	deferring.DeferLeadership = 2 * time.Second
	eager := coordinated(t, c, 5)
	// The eager one leads first; the deferring one, started after, waits
	// for it to stop publishing.
	a, err := throttled.Open(ctx, eager)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if !a.Leader() {
			return errors.New("the eager process does not lead yet")
		}
		return nil
	})
	b, err := throttled.Open(ctx, deferring)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	pgtest.Steady(t, 3*time.Second, func() error {
		if b.Leader() {
			return errors.New("the deferring process took leadership from one that publishes")
		}
		return nil
	})
	a.Close()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var lastPublished time.Time
	if err := admin.QueryRow(ctx, "SELECT published_at FROM throttled.leader WHERE id = 1").Scan(&lastPublished); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		if !b.Leader() {
			return errors.New("the deferring process does not lead with no other leader")
		}
		return nil
	})
	var now time.Time
	if err := admin.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if d := now.Sub(lastPublished); d < deferring.DeferLeadership {
		t.Errorf("the deferring process led %s after the last publication; want at least DeferLeadership %s", d, deferring.DeferLeadership)
	}

	// A process that prefers to lead starts (with a job, so it has a
	// worker row): the deferring leader yields, and it leads.
	c2, err := throttled.Open(ctx, eager)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	if _, err := c2.Pacer(jobs.Config{Name: "prefers-lead"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		if b.Leader() || !c2.Leader() {
			return fmt.Errorf("deferring leads %v, preferring leads %v; want the deferring one to yield", b.Leader(), c2.Leader())
		}
		return nil
	})
}
