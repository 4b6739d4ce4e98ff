package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
)

// A failover or restart is an outage, not a failing batch: a job with
// MaxAttempts 2 rides out a restart of the primary (every pooled
// connection dropped, connections refused meanwhile) and goes on after it.
// (2: a batch in flight as the server shuts down is an attempt.)
// Before MaxOutage a job gave up within the five or so refusals its retry
// budget allowed, seconds into a failover that takes tens of seconds.
func TestAJobRidesOutARestartOfThePrimary(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	ctx := context.Background()
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS outage_batches; CREATE TABLE outage_batches (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	j, err := jobs.New(jobs.Config{Name: "ride-out", MaxAttempts: 2, MaxRetryBackoff: 500 * time.Millisecond},
		db, newFixedPacer(20, 1), func(ctx context.Context, tx pgx.Tx, _ jobs.Batch) (jobs.Result, error) {
			_, err := tx.Exec(ctx, "INSERT INTO outage_batches DEFAULT VALUES")
			return jobs.Result{Rows: 1}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	jctx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- j.Run(jctx) }()
	count := func() int64 {
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM outage_batches").Scan(&n); err != nil {
			return -1
		}
		return n
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if n := count(); n < 10 {
			return fmt.Errorf("%d batches before the restart", n)
		}
		return nil
	})
	if err := c.RestartPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	after := count()
	var ended error
	pgtest.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-runErr:
			ended = fmt.Errorf("the job ended: %w", err)
		default:
		}
		if ended != nil {
			return ended
		}
		if n := count(); n < after+10 {
			return fmt.Errorf("%d batches after the restart; want 10 more than %d", n, after)
		}
		return nil
	})
	stop()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v; want it to run until stopped", err)
	}
}

// An outage is bounded: a database that stays unreachable fails the job
// after MaxOutage, saying so, and the attempts meanwhile back off.
func TestAnOutageLongerThanMaxOutageFailsTheJob(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every connection is refused
	host, port, _ := net.SplitHostPort(addr)
	db, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://u@%s:%s/db?connect_timeout=2", host, port))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var batches atomic.Int64
	j, err := jobs.New(jobs.Config{Name: "unreachable", MaxAttempts: 1, MaxOutage: time.Second, RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond},
		db, newFixedPacer(100, 1), func(context.Context, pgx.Tx, jobs.Batch) (jobs.Result, error) {
			batches.Add(1)
			return jobs.Result{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = j.Run(context.Background())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "database unreachable for") || !strings.Contains(err.Error(), "MaxOutage 1s") {
		t.Fatalf("Run: %v; want the outage named with MaxOutage", err)
	}
	if took < time.Second || took > 10*time.Second {
		t.Fatalf("gave up after %s; want just over MaxOutage (1s)", took)
	}
	if n := batches.Load(); n != 0 {
		t.Fatalf("the batch function ran %d times without a database", n)
	}
}

// Losing the server midway through a batch is an attempt like any other
// (the batch may be what brought it down): MaxAttempts 1 ends the job.
func TestABatchThatLosesItsServerMidwayIsAnAttempt(t *testing.T) {
	c := pgtest.Cluster(t)
	db := pool(t, c)
	var attempts atomic.Int64
	j, err := jobs.New(jobs.Config{Name: "midway", MaxAttempts: 1},
		db, newFixedPacer(100, 1), func(ctx context.Context, tx pgx.Tx, _ jobs.Batch) (jobs.Result, error) {
			attempts.Add(1)
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return jobs.Result{}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	err = j.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "after 1 attempts") || attempts.Load() != 1 {
		t.Fatalf("Run: %v after %d attempts; want it to fail after 1", err, attempts.Load())
	}
	if !jobs.Unreachable(err) {
		t.Fatalf("%v: want it classed as unreachable (it is, but midway)", err)
	}
}

// A job held by its pacer asks its database whether it answers with a
// ping, not a transaction: the primary's canary counts a session idle
// after a transaction as a user's for two seconds, and a paused job's
// probe every 30 s (here every second) made it protect a foreground that
// was not there (signals.PingQuery).
func TestAHeldJobProbesWithAPing(t *testing.T) {
	c := pgtest.Cluster(t)
	cfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "held_job_pool"
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	j, err := jobs.New(jobs.Config{Name: "held", MaxOutage: 4 * time.Second}, db, &holdAfter{}, noBatch)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- j.Run(ctx) }()
	mon := pool(t, c)
	pgtest.Eventually(t, 10*time.Second, func() error {
		var queries []string
		if err := mon.QueryRow(ctx, "SELECT coalesce(array_agg(query), '{}') FROM pg_stat_activity WHERE application_name = 'held_job_pool'").Scan(&queries); err != nil {
			return err
		}
		if len(queries) == 0 || !slices.Contains(queries, signals.PingQuery) {
			return fmt.Errorf("the held job's sessions last ran %q; want a probe's %q", queries, signals.PingQuery)
		}
		for _, q := range queries {
			if q != signals.PingQuery && q != "" {
				return fmt.Errorf("a held job's session last ran %q; want only pings", q)
			}
		}
		return nil
	})
	stop()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v; want it held until stopped", err)
	}
}
