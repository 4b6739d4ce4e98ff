package riverpace_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/jobs/riverpace"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type EmailArgs struct{ N int }

func (EmailArgs) Kind() string { return "email" }

type EmailWorker struct {
	river.WorkerDefaults[EmailArgs]
	worked *atomic.Int64
}

func (w *EmailWorker) Work(ctx context.Context, job *river.Job[EmailArgs]) error {
	w.worked.Add(1)
	return nil
}

// riverSetup migrates River's tables on the pair and opens a throttled
// client at budget with one job's pacer; both close when the test ends.
func riverSetup(t *testing.T, budget float64, job string) (*pgxpool.Pool, *throttled.Client, throttled.JobPacer) {
	t.Helper()
	c := pgtest.Cluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Controller: throttle.Config{MaxBudget: budget, InitialBudget: budget}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	pacer, err := tc.Pacer(jobs.Config{Name: job})
	if err != nil {
		t.Fatal(err)
	}
	return pool, tc, pacer
}

func TestRiverJobsArePacedAndSnoozedWhilePaused(t *testing.T) {
	ctx := context.Background()
	pool, tc, pacer := riverSetup(t, 5, "river_email")
	mw, err := riverpace.New(riverpace.Config{
		PacerFor: func(job *rivertype.JobRow) jobs.Pacer {
			if job.Kind == "email" {
				return pacer
			}
			return nil
		},
		MaxWait: 500 * time.Millisecond,
		Snooze:  time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var worked atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &EmailWorker{worked: &worked})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Workers:           workers,
		Middleware:        []rivertype.Middleware{mw},
		FetchPollInterval: 100 * time.Millisecond,
		FetchCooldown:     50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rc.Stop(context.WithoutCancel(ctx))

	// Paused: jobs are snoozed, not worked, and burn no attempt.
	h, err := tc.LocalHolds().Add(hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual, Reason: "maintenance", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 5*time.Second, func() error {
		js := pacer.Status()
		st := js.State
		if st != "paused" {
			return fmt.Errorf("pacer state %s", st)
		}
		return nil
	})
	for i := range 20 {
		if _, err := rc.Insert(ctx, EmailArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every job is fetched (attempted_at set) and snoozed back: none
	// holds a worker slot (running) waiting for the pause to end.
	pgtest.Eventually(t, 10*time.Second, func() error {
		var fetched, running int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempted_at IS NOT NULL), count(*) FILTER (WHERE state = 'running')
			FROM river_job WHERE kind = 'email'`).Scan(&fetched, &running)
		if err == nil && (fetched < 20 || running > 0) {
			err = fmt.Errorf("%d of 20 jobs fetched, %d running", fetched, running)
		}
		return err
	})
	if n := worked.Load(); n != 0 {
		t.Fatalf("%d jobs worked while paused", n)
	}
	var errored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'email'
		AND (state NOT IN ('available', 'scheduled', 'running') OR cardinality(errors) > 0 OR attempt > 1)`).Scan(&errored); err != nil || errored != 0 {
		t.Fatalf("%d jobs burned an attempt or recorded an error while snoozed (%v)", errored, err)
	}

	// Released: all are worked, at no more than the budget of 5 a second
	// (timed from before the release, which no job can precede).
	start := time.Now()
	if _, err := tc.LocalHolds().Release(h.ID); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 60*time.Second, func() error {
		if n := worked.Load(); n < 20 {
			return fmt.Errorf("%d of 20 worked", n)
		}
		return nil
	})
	if elapsed := time.Since(start); float64(20) > 1+5*elapsed.Seconds()+5 {
		t.Fatalf("20 jobs in %s: faster than 5 a second", elapsed)
	}
}
