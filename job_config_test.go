package throttled_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// Client.Job checks the whole configuration before registering the job: a
// refused one takes no share of the budget, and in coordinated mode leaves
// no worker row for the leader to allocate to.
func TestRefusedJobIsNotRegistered(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	t.Run("local", func(t *testing.T) {
		tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		_, err = tc.Job(jobs.Config{Name: "cfg-refused", MinBatchSize: 10, MaxBatchSize: 5}, nil, nil)
		if err == nil {
			t.Fatal("an invalid job configuration was accepted")
		}
		// A registered job has a decision at every step: the first step
		// after the refusal must not name it.
		refused := time.Now()
		pgtest.Eventually(t, 10*time.Second, func() error {
			if d := tc.Decision(); !d.At.After(refused) {
				return fmt.Errorf("no step since the refusal (last at %s)", d.At)
			}
			return nil
		})
		if _, ok := tc.Decision().Jobs["cfg-refused"]; ok {
			t.Errorf("Job refused the configuration (%v) but the controller still decides for the job", err)
		}
	})
	t.Run("coordinated", func(t *testing.T) {
		tc, err := throttled.Open(ctx, clienttest.Coordinated(t, c, 20))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		_, err = tc.Job(jobs.Config{Name: "cfg-refused-co", MinBatchSize: 10, MaxBatchSize: 5}, nil, nil)
		if err == nil {
			t.Fatal("an invalid job configuration was accepted")
		}
		admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM throttled.workers WHERE job = 'cfg-refused-co' AND heartbeat_at > now() - interval '3 seconds'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("Job refused the configuration (%v) but left %d live worker row(s) for it", err, n)
		}
	})
}

// UpdateJob refuses bad limits in coordinated mode as it does without:
// before writing them to the worker row the leader reads.
func TestCoordinatedUpdateJobRefusesBadLimits(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, clienttest.Coordinated(t, c, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := tc.Pacer(jobs.Config{Name: "cfg-update"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []jobs.Config{
		{Name: "cfg-update", MinRate: 5, MaxRate: 1},
		{Name: "cfg-update", Weight: -1},
	} {
		if err := tc.UpdateJob(bad); err == nil {
			t.Errorf("UpdateJob(%+v) = nil; want the error the uncoordinated client gives", bad)
		}
	}
}
