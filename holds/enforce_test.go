package holds_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// "One audit line per backend and transaction, whichever process sees it
// first", even when several enforcers (one per process) check at the
// same moment: the check and the insert run under a lock on the pair.
func TestConcurrentEnforcersAuditOnce(t *testing.T) {
	c, pool, db := setup(t)
	ctx := context.Background()
	w := holds.NewWatcher(pool, holds.WatcherConfig{})
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("rogue-once"), Source: hold.SourceManual, Reason: "incident", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	rogue := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := rogue.Exec(ctx, "SET application_name = 'throttled:rogue-once'"); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := rogue.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		_, _ = rogue.Exec(context.Background(), "BEGIN; SELECT pg_sleep(20); COMMIT")
	}()
	// Runs before rogue is closed: end its statement and wait for it.
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "SELECT pg_cancel_backend($1)", pid)
		<-busy
	})
	const grace = time.Second
	// Wait (without enforcing) until both the hold and the transaction are past the grace.
	pgtest.Eventually(t, 10*time.Second, func() error {
		var old bool
		if err := pool.QueryRow(ctx, `SELECT coalesce(bool_or(xact_start < now() - interval '1.5 s'), false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&old); err != nil {
			return err
		}
		if !old || time.Since(h.Created) < 2*grace {
			return errors.New("not yet past the grace")
		}
		return nil
	})
	const n = 16
	enforcers := make([]*holds.Enforcer, n)
	for i := range enforcers {
		p, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		enforcers[i] = holds.NewEnforcer(p, w, holds.EnforcerConfig{Grace: grace})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := enforcers[i].Enforce(ctx)
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var lines int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM throttled.audit WHERE event = $1 AND detail->>'pid' = $2`,
		holds.EventPauseNotHonoured, fmt.Sprint(pid)).Scan(&lines); err != nil {
		t.Fatal(err)
	}
	if lines != 1 {
		t.Fatalf("%d pause_not_honoured audit lines for one transaction of pid %d; want 1", lines, pid)
	}
}
