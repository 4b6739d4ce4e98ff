package throttled_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// RemoveJob: "its pacer grants nothing more", even when a heartbeat for
// the worker is already under way and brings back a lease after the
// removal.
func TestRemovedJobGrantsNothingMore(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, p := clienttest.RunningJob(t, clienttest.Coordinated(t, c, 20), "remove-race")
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	watch := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	waiting := func(like string) func() error {
		return func() error {
			var n int
			if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return errors.New("nothing waits yet: " + like)
			}
			return nil
		}
	}
	// Hold the worker's row a moment, as any slow statement would: the
	// next heartbeat waits for it.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM throttled.workers WHERE job = 'remove-race' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 2*time.Second, waiting("%SET heartbeat_at = now(), batches%"))
	removed := make(chan error, 1)
	go func() { removed <- tc.RemoveJob("remove-race") }()
	pgtest.Eventually(t, 2*time.Second, waiting("DELETE FROM throttled.workers%"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	pgtest.Steady(t, 3*time.Second, func() error {
		if done, ok := p.Allow(); ok {
			done(0, 0, nil)
			return errors.New("the removed job's pacer granted a batch")
		}
		return nil
	})
}
