package coord_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// Who leads: a deferring process leads only when no other does.

// A process that defers leadership (throttled exec, which cannot page)
// never takes it from one that publishes, though it started first; once
// the leader is gone it takes over after DeferLeadership.
func TestADeferringProcessLeadsOnlyWhenNoneElseDoes(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	deferring := clienttest.Coordinated(t, c, 5)
	deferring.DeferLeadership = 2 * time.Second
	eager := clienttest.Coordinated(t, c, 5)
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
