package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// A leader whose session ended while it was frozen (the server ended it,
// and another process took the lock and a new term) publishes nothing
// when it wakes: its publication finds a newer term in the same
// statement. Before, Publish went through the pool and checked nothing:
// the revived leader overwrote the new one's decision and renewed leases
// on its stale authority.
func TestRevivedLeaderCannotPublish(t *testing.T) {
	c, admin := setup(t)
	ctx := context.Background()
	pool := store.New(admin) // publications go through the pool, not the lock's session
	if err := pool.Upsert(ctx, store.Worker{ID: "w1", Job: "purge", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	lease := func(id string, rate float64) []store.WorkerLease {
		return []store.WorkerLease{{ID: id, Rate: rate, Burst: 1, InFlight: 1, State: "running", Code: "running"}}
	}

	aConn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	a := store.New(aConn)
	if got, err := a.TryLeaderLock(ctx); err != nil || !got {
		t.Fatalf("a takes the free lock: %v %v", got, err)
	}
	termA, err := a.TakeTerm(ctx, "proc-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Publish(ctx, store.Publication{Leader: "proc-a", Budget: 4, Mode: "running", Lease: time.Minute, Term: termA, Workers: lease("w1", 4)}); err != nil {
		t.Fatalf("a publishes in its term: %v", err)
	}

	// a's session ends (as the server ends a frozen one); b leads.
	var pid int
	if err := aConn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	b := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	pgtest.Eventually(t, 10*time.Second, func() error {
		if got, err := b.TryLeaderLock(ctx); err != nil || !got {
			return fmt.Errorf("b takes the lock: %v %v", got, err)
		}
		return nil
	})
	termB, err := b.TakeTerm(ctx, "proc-b")
	if err != nil || termB <= termA {
		t.Fatalf("b's term %d (%v); want more than a's %d", termB, err, termA)
	}
	if err := pool.Publish(ctx, store.Publication{Leader: "proc-b", Budget: 1, Mode: "throttled", Lease: time.Minute, Term: termB, Workers: lease("w1", 1)}); err != nil {
		t.Fatalf("b publishes in its term: %v", err)
	}

	// a wakes and publishes on its old term: refused, nothing written.
	err = pool.Publish(ctx, store.Publication{Leader: "proc-a", Budget: 9, Mode: "running", Lease: time.Hour, Term: termA, Workers: lease("w1", 9)})
	var fenced *store.FencedError
	if !errors.As(err, &fenced) || fenced.Term != termA {
		t.Fatalf("a's publication after b's term: %v; want a *FencedError for term %d", err, termA)
	}
	var leader string
	var budget, rate float64
	if err := admin.QueryRow(ctx, "SELECT leader, budget FROM throttled.leader WHERE id = 1").Scan(&leader, &budget); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, "SELECT alloc_rate FROM throttled.workers WHERE id = 'w1'").Scan(&rate); err != nil {
		t.Fatal(err)
	}
	if leader != "proc-b" || budget != 1 || rate != 1 {
		t.Errorf("after a's fenced publication: leader %q budget %g, w1's rate %g; want b's: proc-b, 1, 1", leader, budget, rate)
	}
}

// The server ends an election session idle past EndIdleSession's time,
// and with it the lock: a frozen holder blocks another process only that
// long. Before, nothing ended it (TCP keepalives answer for a stopped
// process), and a follower never led.
func TestIdleElectionSessionLosesTheLock(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	const idle = 500 * time.Millisecond
	frozen := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	if err := frozen.EndIdleSession(ctx, idle); err != nil {
		t.Fatal(err)
	}
	// Timed from before the last statement is sent: the server's idle
	// time starts when it answers, which is later, never earlier.
	took := time.Now()
	if got, err := frozen.TryLeaderLock(ctx); err != nil || !got {
		t.Fatalf("take the free lock: %v %v", got, err)
	}
	follower := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	// The holder runs nothing from here: as a stopped process.
	pgtest.Eventually(t, 10*time.Second, func() error {
		got, err := follower.TryLeaderLock(ctx)
		if err != nil || !got {
			return fmt.Errorf("follower takes the lock: %v %v", got, err)
		}
		return nil
	})
	after := time.Since(took)
	t.Logf("the idle holder's lock was free %.2f s after its last statement was sent (idle_session_timeout %s)", after.Seconds(), idle)
	if after < idle {
		t.Errorf("lock free after %s, before the idle timeout %s", after, idle)
	}
}
