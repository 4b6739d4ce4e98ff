package replay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Foreground is the benchmark's open-loop foreground (a pgbench-like
// TPC-B mix, half read-only, Poisson arrivals), for another harness to
// run beside its own work: the fault campaign runs it under its faults.
type Foreground struct {
	g   *generator
	rec *recorder
}

// NewForeground creates the foreground's tables at scale branches on pool
// (dropping earlier ones) and returns the load, ready to Run.
func NewForeground(ctx context.Context, pool *pgxpool.Pool, scale, workers int) (*Foreground, error) {
	if err := execAll(ctx, pool, foregroundTables(scale)); err != nil {
		return nil, err
	}
	return &Foreground{g: newGenerator(pool, scale, 0.5, workers), rec: newRecorder(time.Now())}, nil
}

// Run offers rate transactions a second until ctx ends, in rounds of 10 s
// (a round's transactions finish, or fail, before Run returns).
func (f *Foreground) Run(ctx context.Context, rate float64, seed uint64) {
	for round := uint64(0); ctx.Err() == nil; round++ {
		f.g.run(ctx, rate, time.Now(), 10*time.Second, seed+round, f.rec)
	}
}

// Counts are the transactions done and failed so far, and the 99th
// percentile latency of those done.
func (f *Foreground) Counts() (ok, failed int64, p99 time.Duration) {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	return f.rec.ok, f.rec.failed, f.rec.all.Quantile(0.99)
}
