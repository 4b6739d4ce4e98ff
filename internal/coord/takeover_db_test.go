package coord

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// heldPoller is a sampler whose last readings the test sets: it keeps
// them across a step-down, as signals.Poller keeps its latest.
type heldPoller struct {
	mu   sync.Mutex
	snap signals.Snapshot
}

func (p *heldPoller) set(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snap = signals.Snapshot{At: time.Now(), MaxAge: 5 * time.Second,
		Samples: []signals.Sample{{Name: signals.PrimaryLoad, Value: 0.1, Raw: 0.1, At: at}}}
}

func (p *heldPoller) Snapshot() signals.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snap
	s.At = time.Now()
	return s
}

func (p *heldPoller) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// A leader elected again (after a failover, on the promoted server) does
// not decide on the sampler's readings from before it took over, however
// young: they are of the old primary. It decides once a reading taken
// since arrives. Before, a reading under max_age counted as fresh, and
// the re-elected leader decided (a job read go) on the old primary's
// sample.
func TestReelectedLeaderWaitsForAReadingSinceItTookOver(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := schema.Migrate(context.Background(), admin); err != nil {
		t.Fatal(err)
	}
	e, _ := newEngine(t, c.Primary.DSN(pgcluster.RoleAdmin))
	poller := &heldPoller{}
	var decisions atomic.Int64
	e.poller, e.prepare = poller, func(cfg throttle.Config) throttle.Config { return cfg }
	e.published = func(throttle.Decision) { decisions.Add(1) }
	e.controller = throttle.Config{MaxBudget: 10, InitialBudget: 10}
	ctx := context.Background()

	// The sampler's last reading, a moment old, from before the election.
	poller.set(time.Now().Add(-200 * time.Millisecond))
	e.elect(ctx)
	if !e.Leader() {
		t.Fatal("the engine did not take the free lock")
	}
	e.lead(ctx)
	if n := decisions.Load(); n != 0 {
		t.Fatalf("the new leader decided %d times on a reading from before it took over; want none", n)
	}
	// A reading taken since: it decides.
	poller.set(time.Now())
	e.lead(ctx)
	if n := decisions.Load(); n != 1 {
		t.Fatalf("%d decisions after a reading since the takeover; want 1", n)
	}
}
