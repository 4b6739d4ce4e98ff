package jobs_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
	"github.com/throttled/throttled/throttle/limit"
)

// TestMain runs the tests or, with THROTTLED_TEST_JOB_DSN set, one
// DeleteOlderThan job as a separate process that a test can kill.
func TestMain(m *testing.M) {
	if dsn := os.Getenv("THROTTLED_TEST_JOB_DSN"); dsn != "" {
		os.Exit(runKillableJob(dsn))
	}
	pgtest.Main(m)
}

const killTable, killJob, killWindow = "sessions_kill", "purge-kill", 1000

func runKillableJob(dsn string) int {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return 1
	}
	defer db.Close()
	fn, err := jobs.DeleteOlderThan(ctx, db, killTable, "created_at", "id", 30*24*time.Hour)
	if err != nil {
		return 1
	}
	j, err := jobs.New(jobs.Config{Name: killJob, Checkpoint: true, MinBatchSize: killWindow, MaxBatchSize: killWindow, InitialBatchSize: killWindow},
		db, newFixedPacer(10, 1), fn)
	if err != nil {
		return 1
	}
	if err := j.Run(ctx); err != nil {
		return 1
	}
	return 0
}

// pool opens a pool on the primary as the admin role (jobs write; the
// sampler is the one that must not be a superuser).
func pool(t *testing.T, c *pgcluster.Cluster) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fixedPacer grants at a fixed rate through a real limit.Limiter and
// counts the grants.
type fixedPacer struct {
	l      *limit.Limiter
	grants atomic.Int64
	mu     sync.Mutex
	at     []time.Time
}

func newFixedPacer(rate float64, burst int) *fixedPacer {
	l := limit.New("test", nil)
	l.Apply(limit.Allocation{Rate: rate, Burst: burst, MaxInFlight: 100})
	return &fixedPacer{l: l}
}

func (p *fixedPacer) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	release, err := p.l.Wait(ctx)
	if err != nil {
		return nil, err
	}
	p.grants.Add(1)
	p.mu.Lock()
	p.at = append(p.at, time.Now())
	p.mu.Unlock()
	return func(int64, time.Duration, error) { release.Release() }, nil
}

// table creates name with n rows, every other one older than 30 days.
func table(t *testing.T, db *pgxpool.Pool, name string, n int) (old int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE "+name+" (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, payload text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+name+` SELECT g,
		CASE WHEN g % 2 = 0 THEN now() - interval '60 days' ELSE now() - interval '1 day' END, md5(g::text)
		FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+name+" WHERE created_at < now() - interval '30 days'").Scan(&old); err != nil {
		t.Fatal(err)
	}
	return old
}

func counts(t *testing.T, db *pgxpool.Pool, name string) (old, recent int64) {
	t.Helper()
	err := db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'),
		count(*) FILTER (WHERE created_at >= now() - interval '30 days') FROM `+name).Scan(&old, &recent)
	if err != nil {
		t.Fatal(err)
	}
	return old, recent
}

func TestDeleteOlderThanDeletesExactlyTheOldRowsWithCheckpoints(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	old := table(t, db, "sessions_a", 200_000)
	_, recentBefore := counts(t, db, "sessions_a")
	fn, err := jobs.DeleteOlderThan(ctx, db, "public.sessions_a", "created_at", "id", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.New(jobs.Config{Name: "purge_a", Checkpoint: true, MaxBatchSize: 20000, InitialBatchSize: 2000,
		TargetBatchDuration: 200 * time.Millisecond, Total: old}, db, newFixedPacer(1000, 1), fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	oldAfter, recentAfter := counts(t, db, "sessions_a")
	if oldAfter != 0 || recentAfter != recentBefore {
		t.Fatalf("after the job: %d old rows (want 0), %d recent (want %d)", oldAfter, recentAfter, recentBefore)
	}
	st := j.Status()
	if st.State != jobs.StateDone || st.Rows != old {
		t.Fatalf("status %+v; want done with %d rows", st, old)
	}
	var rows, batches int64
	var done bool
	if err := db.QueryRow(ctx, "SELECT rows, batches, done_at IS NOT NULL FROM throttled.checkpoints WHERE job = 'purge_a'").Scan(&rows, &batches, &done); err != nil {
		t.Fatal(err)
	}
	if rows != old || batches != st.Batches || !done {
		t.Fatalf("checkpoint rows %d batches %d done %v; want %d, %d, true", rows, batches, done, old, st.Batches)
	}
	// Every key window is at most MaxBatchSize rows: 200 000 rows need at
	// least 10 batches.
	if batches < 10 {
		t.Fatalf("%d batches for 200 000 rows with at most 20 000 a batch", batches)
	}
	// A finished job run again starts afresh and finds nothing to do.
	fn2, err := jobs.DeleteOlderThan(ctx, db, "sessions_a", "created_at", "id", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	j2, _ := jobs.New(jobs.Config{Name: "purge_a", Checkpoint: true, MaxBatchSize: 50000, InitialBatchSize: 50000}, db, newFixedPacer(1000, 1), fn2)
	if err := j2.Run(ctx); err != nil || j2.Status().Rows != 0 {
		t.Fatalf("rerun: %v, %+v", err, j2.Status())
	}
}

func TestBatchesRunTaggedUnderAStatementTimeout(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	var app, timeout string
	j, err := jobs.New(jobs.Config{Name: "tagged", StatementTimeout: 1500 * time.Millisecond}, db, newFixedPacer(100, 1),
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			err := tx.QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('statement_timeout')").Scan(&app, &timeout)
			return jobs.Result{Done: true}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if app != "throttled:tagged" || timeout != "1500ms" {
		t.Fatalf("batch ran as application_name %q with statement_timeout %q", app, timeout)
	}
	// The settings are LOCAL: the pooled connection is clean afterwards.
	var after string
	if err := db.QueryRow(context.Background(), "SELECT current_setting('statement_timeout')").Scan(&after); err != nil || after != "0" {
		t.Fatalf("statement_timeout leaked to the pool: %q %v", after, err)
	}
}

func TestRetryableErrorsRetryAndOthersStop(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	var attempts []int
	j, err := jobs.New(jobs.Config{Name: "flaky", RetryBackoff: 10 * time.Millisecond}, db, newFixedPacer(100, 1),
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			attempts = append(attempts, b.Attempt)
			if b.Attempt < 3 {
				_, err := tx.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001'; END $$")
				return jobs.Result{}, err
			}
			return jobs.Result{Rows: 1, Done: true}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(ctx); err != nil {
		t.Fatalf("a batch that succeeds on its third attempt: %v", err)
	}
	if st := j.Status(); len(attempts) != 3 || attempts[2] != 3 || st.Retries != 2 || st.Errors != 2 || st.Rows != 1 {
		t.Fatalf("attempts %v, status %+v", attempts, st)
	}

	if _, err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS uniq (id int PRIMARY KEY); INSERT INTO uniq VALUES (1) ON CONFLICT DO NOTHING"); err != nil {
		t.Fatal(err)
	}
	calls := 0
	j2, _ := jobs.New(jobs.Config{Name: "broken"}, db, newFixedPacer(100, 1), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		calls++
		_, err := tx.Exec(ctx, "INSERT INTO uniq VALUES (1)")
		return jobs.Result{}, err
	})
	err = j2.Run(ctx)
	if err == nil || calls != 1 || !strings.Contains(err.Error(), "not retryable") || !strings.Contains(err.Error(), "23505") {
		t.Fatalf("unique violation: %d calls, %v", calls, err)
	}
	if st := j2.Status(); st.State != jobs.StateFailed || !strings.Contains(st.Reason, "duplicate key") {
		t.Fatalf("status %+v", st)
	}
}

func TestBatchSizeConvergesTowardTheTargetDuration(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	var sizes []int
	// Each row costs 1 ms of server time; the target is 150 ms.
	j, err := jobs.New(jobs.Config{Name: "converge", TargetBatchDuration: 150 * time.Millisecond, InitialBatchSize: 10, MaxBatchSize: 5000},
		db, newFixedPacer(1000, 1), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			sizes = append(sizes, b.Size)
			_, err := tx.Exec(ctx, "SELECT pg_sleep($1)", float64(b.Size)/1000)
			return jobs.Result{Rows: int64(b.Size), Done: len(sizes) == 30}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("batch sizes: %v", sizes)
	// Where it settled: the median of the last ten batches. One batch
	// slowed by the machine (a stall on a loaded CI host) rightly cuts the
	// next, so the last batch alone can sit under the band.
	last := slices.Clone(sizes[len(sizes)-10:])
	slices.Sort(last)
	if settled := last[len(last)/2]; settled < 100 || settled > 180 {
		t.Fatalf("settled at %d rows a batch (the median of the last ten); want about 150 (150 ms at 1 ms a row)", settled)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] > sizes[i-1] && float64(sizes[i]) > float64(sizes[i-1])*1.2+1 {
			t.Fatalf("grew %d -> %d, more than 20%%", sizes[i-1], sizes[i])
		}
	}
}

func TestFailuresNeverExceedTheAllocation(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	const rate = 5.0
	p := newFixedPacer(rate, 1)
	start := time.Now()
	var attempts atomic.Int64
	var wg sync.WaitGroup
	// Four workers of one job, every batch failing with a retryable error
	// and a tiny backoff: the pacer, not the backoff, sets the pace.
	for i := range 4 {
		j, err := jobs.New(jobs.Config{Name: "storm", MaxAttempts: 100, RetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond},
			db, p, func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
				attempts.Add(1)
				_, err := tx.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$")
				return jobs.Result{}, err
			})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			err := j.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), "retry budget exhausted") {
				t.Errorf("worker %d: %v; want the retry budget to stop it", i, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := attempts.Load()
	if n != p.grants.Load() {
		t.Fatalf("%d attempts but %d grants: an attempt skipped the pacer", n, p.grants.Load())
	}
	if limit := 1 + rate*elapsed.Seconds(); float64(n) > limit {
		t.Fatalf("%d attempts in %s; the allocation allows at most %.1f", n, elapsed, limit)
	}
	if n < 20 {
		t.Fatalf("only %d attempts: the retry budget should allow about 6 per worker", n)
	}
}

func TestPausedJobIsVisiblyPausedAndResumes(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var batches atomic.Int64
	j, err := tc.Job(jobs.Config{Name: "pausable"}, db, func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		batches.Add(1)
		_, err := tx.Exec(ctx, "SELECT 1")
		return jobs.Result{Rows: 1}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(runCtx) }()
	pgtest.Eventually(t, 10*time.Second, func() error {
		if batches.Load() < 5 {
			return errors.New("not running yet")
		}
		return nil
	})
	h, err := tc.LocalHolds().Add(hold.Request{Scope: hold.OneJob("pausable"), Source: hold.SourceManual, Reason: "checking the replica", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 5*time.Second, func() error {
		if st := j.Status(); st.State != jobs.StatePaused || !strings.Contains(st.Reason, "checking the replica") {
			return errors.New("status " + string(st.State) + ": " + st.Reason)
		}
		return nil
	})
	paused := batches.Load()
	pgtest.Steady(t, 2*time.Second, func() error {
		if n := batches.Load(); n > paused+1 {
			return errors.New("batches ran while paused")
		}
		return nil
	})
	if _, err := tc.LocalHolds().Release(h.ID); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if batches.Load() <= paused+1 {
			return errors.New("no batch after the release")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if st := j.Status(); st.State != jobs.StateStopped {
		t.Fatalf("state after cancel: %s", st.State)
	}
}

// TestDeleteOlderThanResumesAfterSIGKILL kills the job process mid-run and
// runs it again: the key windows are fixed (1000 keys), so 60 000 rows
// take exactly 60 windows plus the final empty one, however often the job
// is killed. One more batch would mean a window applied twice.
func TestDeleteOlderThanResumesAfterSIGKILL(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	old := table(t, db, killTable, 60_000)
	if _, err := db.Exec(ctx, "DELETE FROM throttled.checkpoints WHERE job = $1", killJob); err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "THROTTLED_TEST_JOB_DSN="+c.Primary.DSN(pgcluster.RoleAdmin))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	checkpoint := func() (position string, rows, batches int64, err error) {
		var p *string
		err = db.QueryRow(ctx, "SELECT position, rows, batches FROM throttled.checkpoints WHERE job = $1", killJob).Scan(&p, &rows, &batches)
		if p != nil {
			position = *p
		}
		return position, rows, batches, err
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		if _, _, b, err := checkpoint(); err != nil || b < 10 {
			return errors.New("fewer than 10 batches committed")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", jobs.AppName(killJob)).Scan(&n); err != nil || n > 0 {
			return errors.New("the killed job's session is still there")
		}
		return nil
	})
	position, rows, batches, err := checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	pos, _ := strconv.ParseInt(position, 10, 64)
	// Exactly the old rows up to the checkpoint are gone: not one beyond
	// it, not one before it left.
	var goneBefore, leftBefore, goneAfter int64
	if err := db.QueryRow(ctx, `SELECT
		$2::bigint / 2 - count(*) FILTER (WHERE id <= $2 AND created_at < now() - interval '30 days'),
		count(*) FILTER (WHERE id <= $2 AND created_at < now() - interval '30 days'),
		$1::bigint - $2::bigint / 2 - count(*) FILTER (WHERE id > $2 AND created_at < now() - interval '30 days')
		FROM `+killTable, old, pos).Scan(&goneBefore, &leftBefore, &goneAfter); err != nil {
		t.Fatal(err)
	}
	if leftBefore != 0 || goneAfter != 0 || goneBefore != rows || pos != batches*killWindow {
		t.Fatalf("killed at position %d after %d batches: %d rows recorded, %d gone before it, %d left before it, %d gone after it",
			pos, batches, rows, goneBefore, leftBefore, goneAfter)
	}
	fn, err := jobs.DeleteOlderThan(ctx, db, killTable, "created_at", "id", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.New(jobs.Config{Name: killJob, Checkpoint: true, MinBatchSize: killWindow, MaxBatchSize: killWindow, InitialBatchSize: killWindow},
		db, newFixedPacer(1000, 1), fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	_, rows, batches, err = checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	oldLeft, recent := counts(t, db, killTable)
	if oldLeft != 0 || recent != 30_000 || rows != old {
		t.Fatalf("after the rerun: %d old rows left, %d recent (want 30000), checkpoint rows %d (want %d)", oldLeft, recent, rows, old)
	}
	if batches != 61 {
		t.Fatalf("%d batches recorded; want 61 (60 windows of 1000 keys and the final empty one)", batches)
	}
}

// progressPacer is a fixedPacer that records the Progress each batch's
// report carries.
type progressPacer struct {
	*fixedPacer
	got []jobs.Progress
}

func (p *progressPacer) WaitProgress(ctx context.Context) (func(int64, time.Duration, error, jobs.Progress), error) {
	done, err := p.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return func(rows int64, took time.Duration, err error, pr jobs.Progress) {
		p.got = append(p.got, pr)
		done(rows, took, err)
	}, nil
}

// A Progresser hears each batch's size, attempt and the rows left by
// Total, with the batch's own report.
func TestProgresserHearsEachBatch(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	p := &progressPacer{fixedPacer: newFixedPacer(100, 1)}
	n := 0
	j, err := jobs.New(jobs.Config{Name: "progress", Total: 25, InitialBatchSize: 10, MinBatchSize: 10, MaxBatchSize: 10, RetryBackoff: time.Millisecond}, db, p,
		func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			n++
			if n == 2 {
				_, err := tx.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001'; END $$")
				return jobs.Result{}, err
			}
			return jobs.Result{Rows: 10, Done: n == 4}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []jobs.Progress{{10, 1, 15}, {10, 1, 15}, {10, 2, 5}, {10, 1, 0}}
	if !slices.Equal(p.got, want) {
		t.Fatalf("progress %+v; want %+v", p.got, want)
	}
}
