package throttled_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// An exemption in the cluster (`throttled exempt --job x --signal
// replica_lag_bytes`, a durable hold) lets its job go on through a
// critical pause that replica lag causes, on the real pair with replay
// paused; the other job pauses. The run while critical is audited as a
// page; the release pauses the job with the others.
func TestAnExemptionHoldRunsItsJobThroughALagCritical(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	opts := clienttest.Coordinated(t, c, 8)
	opts.ReplicaDSNs = []string{c.Replica.DSN(pgcluster.RoleMonitor)}
	opts.Controller.Rules = map[signals.Name]throttle.Rule{signals.ReplicaLagBytes: {Target: 1 << 20, Critical: 2 << 20}}
	tc, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	exempt, err := tc.Pacer(jobs.Config{Name: "exempt-job"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := tc.Pacer(jobs.Config{Name: "other-job"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(exempt) })
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
	h, err := store.Add(ctx, hold.Request{Scope: hold.OneJob("exempt-job"), Source: hold.SourceCLI,
		Reason: "the replica is being rebuilt", Actor: "alice", TTL: time.Hour, Exempt: string(signals.ReplicaLagBytes)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Release(context.Background(), h.ID, "alice", hold.SourceCLI, "test over") })
	if h.Exempt != string(signals.ReplicaLagBytes) || h.Pauses() {
		t.Fatalf("stored hold %+v; want an exemption from replica_lag_bytes", h)
	}
	// With nothing critical, the exemption changes nothing.
	if err := clienttest.Running(exempt); err != nil {
		t.Fatal(err)
	}

	if err := c.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ResumeReplay(context.Background()) })
	if err := c.WriteWAL(ctx, 4<<20); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		if d := tc.Decision(); d.Mode != status.ModeCritical {
			return fmt.Errorf("mode %s (%s); want critical on replica lag", d.Mode, d.Reason)
		}
		st, ot := exempt.Status(), other.Status()
		if st.Code != status.CodeExempt || st.Rate <= 0 || !strings.Contains(st.Reason, "exempt from replica_lag_bytes by hold "+h.ID) {
			return fmt.Errorf("exempt-job %s at %v (%s); want exempt, running", st.Code, st.Rate, st.Reason)
		}
		if ot.Code != status.CodeCritical || ot.State != status.JobPaused {
			return fmt.Errorf("other-job %s (%s); want paused, critical", ot.Code, ot.Reason)
		}
		return nil
	})
	// The run while critical is a page, in the audit log with the hold.
	pgtest.Eventually(t, 10*time.Second, func() error {
		es, err := db.Audit().Since(ctx, time.Now().Add(-time.Hour))
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.Event == holds.EventMode && strings.Contains(e.Reason, "job exempt-job runs while critical") && strings.Contains(e.Reason, h.ID) {
				return nil
			}
		}
		return fmt.Errorf("no audit entry of exempt-job running while critical among %d", len(es))
	})

	// Released: the job pauses with the other at once.
	if _, err := store.Release(ctx, h.ID, "alice", hold.SourceCLI, "rebuild done"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if st := exempt.Status(); st.Code != status.CodeCritical || st.State != status.JobPaused {
			return fmt.Errorf("exempt-job after release: %s (%s); want paused, critical", st.Code, st.Reason)
		}
		return nil
	})
}
