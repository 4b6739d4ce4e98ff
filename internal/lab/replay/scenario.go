package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// replicaName is the test pair's replica.
const replicaName = pgcluster.ReplicaName

// Scenario is a timeline of events over one run.
type Scenario struct {
	// Name identifies the scenario on the command line.
	Name string
	// Description says what happens, for the report.
	Description string
	// Events happen over the run; they may overlap. In a block (the
	// interleaved instrument) they run throughout.
	Events []Event
	// RateFactor scales the calibrated foreground rate (0 means 1: a
	// quiet foreground is a tenth of it).
	RateFactor float64
	// NoForeground: no foreground at all (idle).
	NoForeground bool
	// ReadOnly, when not 0, is the foreground's share of read-only
	// transactions in place of the configured one.
	ReadOnly float64
	// SmallWrites makes each read-write foreground transaction one
	// small insert and its commit: the users' commits compete with the
	// job's WAL.
	SmallWrites bool
	// MinRows, when not 0, is the fewest rows the cleaned table needs
	// for this scenario's block, over DefaultBlockRows: where the job
	// meets the least contention (no foreground, a light one, a
	// foreground of small writes) every policy cleans faster, and with no
	// foreground adaptive's 20 s windows alone outrun the default table's
	// old rows.
	MinRows int64
}

// BlockRowsFor is the cleaned table's size for blocks of the scenarios
// named: rows, or more where a scenario needs more (Scenario.MinRows).
func BlockRowsFor(names []string, rows int64) int64 {
	for _, n := range names {
		if sc, ok := scenarioByName(n); ok {
			rows = max(rows, sc.MinRows)
		}
	}
	return rows
}

// scenarioByName returns the scenario called name.
func scenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Event is one fault or change; in a block it runs throughout
// (runEventsThroughout), started with the block's remaining length.
type Event struct {
	Name  string
	start func(ctx context.Context, e *env, d time.Duration) (stop func() error, err error)
}

// env is what an event acts on.
type env struct {
	c     *pgcluster.Cluster
	gen   *generator
	admin *pgxpool.Pool
	cores int
}

// surgeBy multiplies the foreground's arrivals by m while it lasts.
func surgeBy(m float64) func(context.Context, *env, time.Duration) (func() error, error) {
	return func(_ context.Context, e *env, _ time.Duration) (func() error, error) {
		e.gen.setMultiplier(m)
		return func() error { e.gen.setMultiplier(1); return nil }, nil
	}
}

// Scenarios returns every scenario, in report order.
func Scenarios() []Scenario {
	surge := surgeBy
	// cpu starts perCore busy sessions per core, at least one.
	cpu := func(perCore float64) func(context.Context, *env, time.Duration) (func() error, error) {
		return func(ctx context.Context, e *env, d time.Duration) (func() error, error) {
			s, err := e.c.CPULoad(ctx, max(1, int(perCore*float64(e.cores))), d+time.Minute, "replay_cpu_hog")
			if err != nil {
				return nil, err
			}
			return s.Stop, nil
		}
	}
	return []Scenario{
		{Name: "surge", Description: "foreground arrivals doubled throughout",
			Events: []Event{{Name: "surge x2", start: surge(2)}}},
		{Name: "cpu-hog", Description: "two busy sessions per core spin on the primary's CPU throughout",
			Events: []Event{{Name: "cpu hog", start: cpu(2)}}},
		{Name: "replay-paused", Description: "WAL replay paused on the replica throughout, its hot_standby_feedback off (so it does not pin the primary's horizon too): lag grows with every write",
			Events: []Event{{Name: "replay paused", start: pauseReplay}}},
		{Name: "conn-storm", Description: "idle connections open until 3 client slots are left, throughout",
			Events: []Event{{Name: "connection storm", start: connStorm}}},
		{Name: "lock-contention", Description: "a session takes SHARE locks on the cleaned table (held 2 s of every 3) throughout: deletes wait",
			Events: []Event{{Name: "table locked", start: lockPulses}}},
		// The incident: the primary was busy but healthy until the cleanup
		// job's writes took it to its limit, while replica lag stayed low.
		// The foreground alone stays near the load target here; it must
		// not saturate the primary by itself, or every policy's p99 would
		// measure the host's queue and not the job's cost.
		{Name: "2026-09-13", Description: "the incident: foreground arrivals x1.5 and one busy session per two cores throughout; the foreground alone keeps the primary near its load target, so the job's writes take it towards saturation while the replica keeps up (lag near 0)",
			Events: []Event{{Name: "surge x1.5 + cpu", start: func(ctx context.Context, e *env, d time.Duration) (func() error, error) {
				stop, err := cpu(0.5)(ctx, e, d)
				if err != nil {
					return nil, err
				}
				e.gen.setMultiplier(1.5)
				return func() error { e.gen.setMultiplier(1); return stop() }, nil
			}}}},
		// Fast when it is safe: with nobody to protect, a cleanup should
		// run near its ceiling.
		// At its ceiling (about 100,000 rows a second on this machine)
		// adaptive's six 20 s windows take 12 million old rows, and
		// unthrottled and the four fixed rates after it three more.
		{Name: "idle", Description: "no foreground at all: the job's ceiling, and how near each policy comes to it", NoForeground: true, MinRows: 40_000_000},
		{Name: "quiet", Description: "a light foreground, a tenth of the calibrated rate: a cleanup on a quiet primary must be fast and still gentle", RateFactor: 0.1, MinRows: 20_000_000},
		{Name: "write-heavy", Description: "a foreground of small writes (nine in ten transactions one insert and its commit): the job's WAL competes with the users' commits", ReadOnly: 0.1, SmallWrites: true, MinRows: 20_000_000},
	}
}

// ScenarioNames lists the scenarios' names, in report order.
func ScenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// pauseReplay pauses WAL replay on the replica until stopped.
//
// The replica's hot_standby_feedback is off meanwhile. With it on, the
// paused replica pins the primary's xmin horizon, the foreground's
// hot tables bloat, and within two minutes the foreground alone
// saturates the primary (its latency grows without bound): every window
// would measure that queue, not the job. A pinned horizon is
// long-transaction's disturbance; this scenario is lag's.
func pauseReplay(ctx context.Context, e *env, _ time.Duration) (func() error, error) {
	if err := e.c.SetReplicaFeedback(ctx, false); err != nil {
		return nil, err
	}
	if err := e.c.PauseReplay(ctx); err != nil {
		return nil, errors.Join(err, e.c.SetReplicaFeedback(context.Background(), true))
	}
	return func() error {
		return errors.Join(e.c.ResumeReplay(context.Background()), e.c.SetReplicaFeedback(context.Background(), true))
	}, nil
}

// connStorm opens idle connections until stormFree client slots are left.
func connStorm(ctx context.Context, e *env, _ time.Duration) (func() error, error) {
	const stormFree = 3
	var free int
	err := e.admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
		- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&free)
	if err != nil {
		return nil, fmt.Errorf("replay: free connection slots: %w", err)
	}
	s, err := e.c.OpenConnections(ctx, max(0, free-stormFree))
	if err != nil {
		return nil, err
	}
	return s.Stop, nil
}

// lockPulses holds a SHARE lock on the cleaned table for 2 s of every 3
// until stopped.
func lockPulses(ctx context.Context, e *env, _ time.Duration) (func() error, error) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	wg.Go(func() {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			s, err := e.c.LockTable(pctx, EventsTable, "SHARE")
			if err != nil {
				if pctx.Err() == nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				return
			}
			select {
			case <-pctx.Done():
			case <-time.After(2 * time.Second):
			}
			if err := s.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			t.Reset(time.Second)
		}
	})
	return func() error {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(errs...)
	}, nil
}

// sleepUntil waits until t or ctx's end, reporting whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
