package throttled_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
	"golang.org/x/time/rate"
)

// benchBudget is the client benchmarks' budget: far above what one
// goroutine can take, so Acquire never waits for a token and the
// benchmarks measure the path, not the rate.
const benchBudget = 1e7

// noDB is a jobs.DB for jobs driven only through Acquire, which never
// begins a transaction.
type noDB struct{}

func (noDB) Begin(context.Context) (pgx.Tx, error) { panic("benchmark job began a transaction") }

// benchJob opens a client with opts and returns a job of it once the job
// may run. The client is closed when the benchmark ends.
func benchJob(b *testing.B, opts throttled.Options, name string) *jobs.Job {
	b.Helper()
	tc, err := throttled.Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tc.Close() })
	job, err := tc.Job(jobs.Config{Name: name}, noDB{}, func(context.Context, pgx.Tx, jobs.Batch) (jobs.Result, error) {
		return jobs.Result{}, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	pgtest.Eventually(b, 20*time.Second, func() error {
		t, err := job.Acquire(context.Background())
		if err != nil {
			return err
		}
		t.Done(0, nil)
		return nil
	})
	return job
}

func benchAcquire(b *testing.B, job *jobs.Job) {
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		t, err := job.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t.Done(1, nil)
	}
}

// BenchmarkClientAcquire is one batch's Acquire and Done on a job of a
// solo client (it samples and decides itself).
func BenchmarkClientAcquire(b *testing.B) {
	c := pgtest.Cluster(b)
	job := benchJob(b, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Controller: throttle.Config{MaxBudget: benchBudget, InitialBudget: benchBudget}}, "bench-solo")
	benchAcquire(b, job)
}

// BenchmarkClientAcquireCoordinated is BenchmarkClientAcquire on a
// coordinated client, which leads: its allocation comes from its own
// published lease, and its batches count towards its heartbeats.
func BenchmarkClientAcquireCoordinated(b *testing.B) {
	c := pgtest.Cluster(b)
	job := benchJob(b, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Controller: throttle.Config{MaxBudget: benchBudget, InitialBudget: benchBudget}}, "bench-coordinated")
	benchAcquire(b, job)
}

// BenchmarkClientAcquireAnchor is the client benchmarks' anchor:
// rate.Limiter.Wait, what a caller pacing its own loop would use.
func BenchmarkClientAcquireAnchor(b *testing.B) {
	l := rate.NewLimiter(benchBudget, int(benchBudget))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
