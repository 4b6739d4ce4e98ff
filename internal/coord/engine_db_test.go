package coord_test

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
	"github.com/throttled/throttled/throttle"
)

// The tests of coordinated mode through the Client that wires it (package
// throttled, the module root), against the package's own throwaway pair.

func TestMain(m *testing.M) { pgtest.Main(m) }

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
	js := p.Status()
	st, r := js.State, js.Reason
	if st == throttle.JobPaused {
		return fmt.Errorf("%s: %s", st, r)
	}
	return nil
}
