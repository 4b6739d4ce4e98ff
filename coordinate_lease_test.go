package throttled_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
)

// The lease outlives the leader's tick: with a Tick over 3 s no worker's
// lease lapses between publications while nothing is wrong.
func TestLeaseOutlivesTheTick(t *testing.T) {
	c := pgtest.Cluster(t)
	opts := coordinated(t, c, 20)
	opts.Controller.Tick = 4 * time.Second
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p, err := tc.Pacer(jobs.Config{Name: "tick-lease"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return running(p) })
	pgtest.Steady(t, 2*opts.Controller.Tick, func() error { return running(p) })
}
