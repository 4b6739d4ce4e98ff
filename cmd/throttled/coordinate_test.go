package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// leaderPID is the pid of the process that last published, and when.
func leaderPID(t *testing.T, admin *pgx.Conn) (int, time.Time) {
	t.Helper()
	var leader string
	var at time.Time
	if err := admin.QueryRow(context.Background(), "SELECT leader, published_at FROM throttled.leader WHERE id = 1").Scan(&leader, &at); err != nil {
		return 0, time.Time{}
	}
	parts := strings.Split(leader, ":")
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid, at
}

func samplerSessions(t *testing.T, admin *pgx.Conn) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'throttled-sampler'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLeaderFailoverKeepsHoldsAndWorkersGoing(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	oldNew(t, admin, "lf_run", 200_000)
	oldNew(t, admin, "lf_held", 200_000)
	dsn := c.Primary.DSN(pgcluster.RoleAdmin)
	workers := []*worker{startWorker(t, c, "lf-run", "lf_run"), startWorker(t, c, "lf-run", "lf_run"), startWorker(t, c, "lf-run", "lf_run")}
	held := startWorker(t, c, "lf-held", "lf_held")
	cli(t, "pause", "--primary-dsn", dsn, "--job", "lf-held", "--ttl", "10m", "--reason", "keep held through the failover")
	pgtest.Eventually(t, 30*time.Second, func() error {
		if r, _ := jobProgress(t, admin, "lf-run"); r < 300 {
			return fmt.Errorf("lf-run: %d rows", r)
		}
		return nil
	})
	heldRows, _ := jobProgress(t, admin, "lf-held")
	if n := samplerSessions(t, admin); n != 1 {
		t.Fatalf("%d sampler sessions for 4 workers; want 1 (the leader's)", n)
	}
	pid, _ := leaderPID(t, admin)
	var leader *worker
	for _, w := range append(workers, held) {
		if w.cmd.Process.Pid == pid {
			leader = w
		}
	}
	if leader == nil {
		t.Fatalf("leader pid %d is none of the workers", pid)
	}
	var killedAt time.Time
	admin.QueryRow(ctx, "SELECT now()").Scan(&killedAt)
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Another process leads within a few seconds.
	pgtest.Eventually(t, 10*time.Second, func() error {
		if p, at := leaderPID(t, admin); p == pid || !at.After(killedAt) {
			return fmt.Errorf("leader %d, last published %s", p, at)
		}
		return nil
	})
	newPID, _ := leaderPID(t, admin)
	t.Logf("leader %d killed; %d leads", pid, newPID)
	// lf-run goes on; lf-held never moved.
	before, _ := jobProgress(t, admin, "lf-run")
	pgtest.Eventually(t, 15*time.Second, func() error {
		if r, _ := jobProgress(t, admin, "lf-run"); r <= before {
			return fmt.Errorf("lf-run stuck at %d rows after the failover", r)
		}
		return nil
	})
	if r, _ := jobProgress(t, admin, "lf-held"); r != heldRows {
		t.Fatalf("the held job moved from %d to %d rows through the failover", heldRows, r)
	}
	if n := samplerSessions(t, admin); n != 1 {
		t.Fatalf("%d sampler sessions after the failover; want 1", n)
	}
	for _, w := range append(workers, held) {
		if w != leader {
			w.stop(t)
		}
	}
	cli(t, "resume", "--primary-dsn", dsn, "--job", "lf-held")
}

func TestManyWorkersSampleLikeOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{MaxConnections: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	admin, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	oldNew(t, admin, "many", 100_000)
	const n = 20
	for range n {
		startWorker(t, c, "many", "many")
	}
	var last int64
	pgtest.Eventually(t, 60*time.Second, func() error {
		var live int
		admin.QueryRow(ctx, "SELECT count(*) FROM throttled.workers WHERE job = 'many' AND heartbeat_at > now() - interval '3 seconds' AND lease_until > now()").Scan(&live)
		r, _ := jobProgress(t, admin, "many")
		if live < n || r <= last {
			last = r
			return fmt.Errorf("%d of %d workers leased, %d rows", live, n, r)
		}
		return nil
	})
	// One sampler for the cluster, however many workers.
	pgtest.Steady(t, 3*time.Second, func() error {
		if s := samplerSessions(t, admin); s != 1 {
			return fmt.Errorf("%d sampler sessions with %d workers; want 1", s, n)
		}
		return nil
	})
}
