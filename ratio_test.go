package throttled_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// A live override in the cluster (a durable hold with a ratio, as
// `throttled throttle --job x --ratio 0.25` places) reaches a running
// worker of a coordinated cluster, as `throttled exec` is: it runs at a
// quarter of its allocation, says why, is not a violation of a pause, and
// is back at its whole allocation when the hold is released.
func TestARatioHoldScalesARunningWorker(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, p := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 8), "ratio-job")
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := holds.New(pool, holds.Config{}) // on the schema the Client migrated
	if err != nil {
		t.Fatal(err)
	}
	store := db.Holds()
	rate := func() float64 { return p.Status().Rate }
	pgtest.Eventually(t, 20*time.Second, func() error {
		if r := rate(); r < 7 {
			return fmt.Errorf("rate %v; want the whole budget, 8", r)
		}
		return nil
	})
	h, err := store.Add(ctx, hold.Request{Scope: hold.OneJob("ratio-job"), Source: hold.SourceCLI, Reason: "slow it during the deploy", Actor: "alice", TTL: time.Hour, Ratio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Release(context.Background(), h.ID, "alice", hold.SourceCLI, "test over") })
	pgtest.Eventually(t, 10*time.Second, func() error {
		js := p.Status()
		st, reason, r := js.State, js.Reason, js.Rate
		if st != status.JobThrottled || math.Abs(r-2) > 0.5 || !strings.Contains(reason, "scaled to 25% by hold "+h.ID) {
			return fmt.Errorf("%s at %v (%s); want throttled at a quarter of 8, naming the hold", st, r, reason)
		}
		return nil
	})
	if vs, err := holds.NewEnforcer(pool, tc.HoldWatcher(), holds.EnforcerConfig{Grace: time.Millisecond}).Enforce(ctx); err != nil || len(vs) != 0 {
		t.Errorf("Enforce under a ratio hold: %v, %v; want no violation: the job may work", vs, err)
	}
	if _, err := store.Release(ctx, h.ID, "alice", hold.SourceCLI, "deploy done"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		js := p.Status()
		st, r := js.State, js.Rate
		if st != status.JobRunning || r < 7 {
			return fmt.Errorf("%s at %v; want running at the whole budget again", st, r)
		}
		return nil
	})
}
