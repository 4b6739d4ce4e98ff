// Package clienttest opens throttled.Clients for tests of coordinated
// mode: the root package's and internal/coord's, against the test
// package's throwaway pair (internal/testenv/pgtest).
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// Coordinated is the options of a coordinated client on c: sampling as
// the pg_monitor role, coordinating as the admin, at a fixed budget.
func Coordinated(t testing.TB, c *pgcluster.Cluster, budget float64) throttled.Options {
	t.Helper()
	return throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Controller: throttle.Config{MaxBudget: budget, InitialBudget: budget}}
}

// LeaderAndFollower opens two clients with opts (closed when the test
// ends), the first once it leads.
func LeaderAndFollower(t testing.TB, opts throttled.Options) (leader, follower *throttled.Client) {
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

// RunningJob opens a client with opts (closed when the test ends) and
// returns it with job's pacer, once the job runs.
func RunningJob(t testing.TB, opts throttled.Options, job string) (*throttled.Client, throttled.JobPacer) {
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
	pgtest.Eventually(t, 20*time.Second, func() error { return Running(p) })
	return tc, p
}

// Running is nil while p's job may run, else its state and reason.
func Running(p throttled.JobPacer) error {
	if st := p.Status(); st.State == status.JobPaused {
		return fmt.Errorf("%s: %s", st.State, st.Reason)
	}
	return nil
}
